// Jinja parser: tokens (lexer.h) to a statement tree (ast.h), with jinja2's operator precedence.
#pragma once

#include <string>
#include <vector>

#include "io/jinja/ast.h"
#include "io/jinja/lexer.h"

namespace weft::jinja {

// Throws jinja::Error naming line:column on a syntax error or an unknown/unclosed statement.
// Nesting deeper than max_depth (expressions and blocks together) is an error, not a stack overflow.
Body parse(const std::vector<Token>& tokens, int max_depth = 200);

}  // namespace weft::jinja
