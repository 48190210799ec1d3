// Syntax tree of a parsed Jinja template: expressions and statements, each with the line:column
// where it starts so that render errors can point into the template.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/jinja/value.h"

namespace weft::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    // literal
    kName,       // name
    kList,       // args = elements
    kTuple,      // args = elements
    kDict,       // args = key0, value0, key1, value1, ...
    kGetAttr,    // args[0].name
    kGetItem,    // args[0][args[1]]
    kSlice,      // args[0][args[1]:args[2]:args[3]] (null = omitted)
    kCall,       // args[0](args[1:], kwargs)
    kFilter,     // args[0] | name(args[1:], kwargs)
    kTest,       // args[0] is [not] name(args[1:])
    kUnary,      // name in {"-", "+", "not"} applied to args[0]
    kBinary,     // args[0] name args[1]; name in {+ - * / // % ** ~ and or}
    kCompare,    // args[0] ops[0] args[1] ops[1] args[2] ...
    kCondition,  // args[1] if args[0] else args[2] (args[2] null: undefined)
  };
  Kind kind;
  int line = 0, column = 0;
  std::string name;
  Value literal;
  std::vector<ExprPtr> args;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
  std::vector<std::string> ops;
  bool negated = false;
  // Longest path to a leaf. The parser refuses trees taller than kMaxHeight, so evaluating and
  // freeing an expression never recurses deeper than that, however long an operator chain is.
  int height = 1;
  static constexpr int kMaxHeight = 400;
};

struct Stmt;
using Body = std::vector<std::unique_ptr<Stmt>>;

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ exprs[0] }}
    kIf,           // exprs = conditions; bodies = one per condition, plus else when present
    kFor,          // targets in exprs[0] [if exprs[1]]; bodies[0] = body, bodies[1] = else
    kSet,          // targets[0] (or targets[0].attr, or several names unpacked) = exprs[0]
    kSetBlock,     // targets[0] = rendered bodies[0]
    kMacro,        // macro targets[0](params) with defaults (null = required)
    kBreak,
    kContinue,
    kFilterBlock,  // bodies[0] rendered then piped through exprs[0] (a kFilter on a placeholder)
    kGeneration,   // transformers' {% generation %}: renders bodies[0] as is
  };
  Kind kind;
  int line = 0, column = 0;
  std::string text;
  std::string attr;
  std::vector<std::string> targets;
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;
  std::vector<ExprPtr> exprs;
  std::vector<Body> bodies;
};

}  // namespace weft::jinja
