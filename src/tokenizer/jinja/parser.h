// Builds the syntax tree of a template from its tokens, following Jinja2's grammar and
// operator precedence for the statements chat templates use.
#pragma once

#include <string_view>
#include <vector>

#include "tokenizer/jinja/ast.h"
#include "tokenizer/jinja/lexer.h"

namespace ridge::jinja {

// Throws TemplateError (kSyntax) naming the line and column of the offending token.
Body parse_tokens(const std::vector<Token>& tokens, std::string_view template_name);

}  // namespace ridge::jinja
