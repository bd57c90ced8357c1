# Included by the top-level CMakeLists.txt after ridge_room(server ...): cpp-httplib and
# the chat page (web/) embedded as a generated source.

# Debian's libcpp-httplib-dev ships httplib.h plus a compiled libcpp-httplib.so built with
# OpenSSL, zlib and Brotli support; its pkg-config file carries the matching defines, which
# must be the same here (they change the layout of httplib::Request).
find_package(PkgConfig REQUIRED)
pkg_check_modules(CPP_HTTPLIB REQUIRED IMPORTED_TARGET cpp-httplib)
target_link_libraries(ridge_server PUBLIC PkgConfig::CPP_HTTPLIB nlohmann_json::nlohmann_json Threads::Threads)

file(GLOB ridge_web_files CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/web/*)
set(ridge_web_cpp ${CMAKE_BINARY_DIR}/generated/web_assets_data.cpp)
add_custom_command(
  OUTPUT ${ridge_web_cpp}
  COMMAND ${CMAKE_COMMAND} -DWEB_DIR=${CMAKE_SOURCE_DIR}/web -DOUTPUT=${ridge_web_cpp}
          -P ${CMAKE_SOURCE_DIR}/src/server/embed_web.cmake
  DEPENDS ${ridge_web_files} ${CMAKE_SOURCE_DIR}/src/server/embed_web.cmake
  COMMENT "Embedding the chat page (web/)"
  VERBATIM)
target_sources(ridge_server PRIVATE ${ridge_web_cpp})
