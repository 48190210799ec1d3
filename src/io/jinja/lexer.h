// Jinja lexer: splits template text into text runs and the tokens inside {{ }}, {% %}, with
// jinja2's whitespace rules as transformers configures them (trim_blocks, lstrip_blocks, '-'/'+'
// markers, {% raw %}, comments dropped, newlines normalized, one trailing newline removed).
#pragma once

#include <string>
#include <vector>

namespace weft::jinja {

struct Token {
  enum class Type { kText, kVarBegin, kVarEnd, kBlockBegin, kBlockEnd, kName, kString, kInt, kFloat, kOp, kEof };
  Type type;
  std::string text;  // kText: the text; kString: the unescaped value; kName/kOp/kInt/kFloat: spelling
  int line = 1, column = 1;
};

struct LexOptions {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Throws jinja::Error (with line:column) on an unterminated tag, string or comment, or a
// character that starts no token.
std::vector<Token> lex(const std::string& source, const LexOptions& options = {});

}  // namespace weft::jinja
