// Splits a template into tokens the way Jinja2's lexer does with the settings Hugging
// Face's apply_chat_template uses: trim_blocks and lstrip_blocks on, "-" and "+"
// whitespace control, comments dropped, {% raw %} kept as text, \r\n and \r read as \n,
// and one trailing newline of the template removed (keep_trailing_newline off).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/jinja/ast.h"

namespace ridge::jinja {

enum class TokenKind {
  kText,        // template data between tags
  kVarBegin,    // {{
  kVarEnd,      // }}
  kBlockBegin,  // {%
  kBlockEnd,    // %}
  kName,
  kString,      // text: the unescaped value
  kInteger,
  kFloat,
  kOperator,    // text: the operator
  kEnd,
};

struct Token {
  TokenKind kind;
  std::string text;
  Location where;
};

// Throws TemplateError (a syntax error naming line and column) on an unterminated tag,
// comment or string, an unbalanced bracket or a character that starts no token.
std::vector<Token> tokenize(std::string_view source, std::string_view template_name);

}  // namespace ridge::jinja
