#include "server/api_error.h"

namespace ridge::server {

static std::string default_type(int status) {
  if (status == 401) return "authentication_error";
  if (status == 404 || status == 413 || status < 500) return "invalid_request_error";
  return "server_error";
}

ApiError::ApiError(int status, const std::string& message, std::string param, std::string code, std::string type)
    : Error(message),
      status(status),
      type(type.empty() ? default_type(status) : std::move(type)),
      param(std::move(param)),
      code(std::move(code)) {}

nlohmann::json error_json(const ApiError& error) {
  using nlohmann::json;
  auto or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  return {{"error",
           {{"message", error.what()}, {"type", error.type}, {"param", or_null(error.param)},
            {"code", or_null(error.code)}}}};
}

std::string dump_json(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string dump_json(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace ridge::server
