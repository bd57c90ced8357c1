#include "server/web_assets.h"

namespace ridge::server {

const WebAsset* find_web_asset(std::string_view path) {
  if (path == "/") path = "/index.html";
  for (const WebAsset& asset : web_assets())
    if (asset.path == path) return &asset;
  return nullptr;
}

const char* content_type_for(std::string_view path) {
  struct Type {
    std::string_view extension;
    const char* content_type;
  };
  static constexpr Type kTypes[] = {
      {".html", "text/html; charset=utf-8"}, {".js", "text/javascript; charset=utf-8"},
      {".css", "text/css; charset=utf-8"},   {".svg", "image/svg+xml"},
      {".png", "image/png"},                 {".ico", "image/x-icon"},
      {".json", "application/json"},
  };
  for (const Type& t : kTypes)
    if (path.ends_with(t.extension)) return t.content_type;
  return "application/octet-stream";
}

}  // namespace ridge::server
