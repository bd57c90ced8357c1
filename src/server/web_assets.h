// The chat page (web/*: HTML, JS, CSS), compiled into the binary so `ridge serve` needs
// no files beside it. The bytes come from a .cpp that CMake generates from web/ at build
// time (src/server/embed_web.cmake).
//
//   if (const WebAsset* a = find_web_asset(req.path))
//     res.set_content(a->body.data(), a->body.size(), content_type_for(a->path));
#pragma once

#include <span>
#include <string_view>

namespace ridge::server {

struct WebAsset {
  std::string_view path;  // "/index.html", "/app.js", ...
  std::string_view body;
};

// Every embedded file (defined in the generated source).
std::span<const WebAsset> web_assets();

// "/" means "/index.html"; nullptr when there is no such file.
const WebAsset* find_web_asset(std::string_view path);

// By extension: text/html, text/javascript, text/css, ...; application/octet-stream else.
const char* content_type_for(std::string_view path);

}  // namespace ridge::server
