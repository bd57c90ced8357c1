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

// Sent with every page file: scripts, styles and fetches from this server only, no
// plugins, frames or form posts, so even a rendering bug could not run or load anything
// from a model's answer (the page builds DOM nodes from model text, never HTML).
inline constexpr const char* kPageSecurityPolicy =
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

// By extension: text/html, text/javascript, text/css, ...; application/octet-stream else.
const char* content_type_for(std::string_view path);

}  // namespace ridge::server
