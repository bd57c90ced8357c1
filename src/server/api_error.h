// OpenAI-style API errors: an HTTP status plus the {"error": {message, type, param, code}}
// object OpenAI's clients parse. Request handlers throw ApiError; the server turns it
// (and anything else thrown while serving one request) into a response.
//
//   throw ApiError(400, "'max_tokens' must be >= 1, got -5", "max_tokens");
//   res.status = e.status;  res.body = error_json(e).dump();
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "core/error.h"

namespace ridge::server {

class ApiError : public Error {
 public:
  // type defaults from the status as OpenAI does: invalid_request_error for 4xx,
  // authentication_error for 401, server_error for 5xx.
  ApiError(int status, const std::string& message, std::string param = "", std::string code = "",
           std::string type = "");
  int status;
  std::string type;
  std::string param;  // the request field at fault; "" when none (null in JSON)
  std::string code;   // "" when none (null in JSON)
};

// {"error": {"message": ..., "type": ..., "param": ..., "code": ...}}
nlohmann::json error_json(const ApiError& error);

// The JSON text of a value for the wire: invalid UTF-8 (a token piece that is half of a
// character) is replaced by U+FFFD rather than throwing.
std::string dump_json(const nlohmann::json& value);
std::string dump_json(const nlohmann::ordered_json& value);

}  // namespace ridge::server
