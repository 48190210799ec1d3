// Recursive-descent Jinja parser. Precedence, loosest first (as jinja2): inline if, or, and, not,
// comparisons/in, + -, ~, * / // %, **, unary - +, then postfix . [] () and the filter/test chain
// (| name, is name) which binds tighter than any binary operator.
#include "io/jinja/parser.h"

#include <algorithm>
#include <charconv>
#include <cstdlib>

namespace weft::jinja {
namespace {

using T = Token::Type;

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, int max_depth) : toks_(tokens), max_depth_(max_depth) {}

  Body parse_template() {
    Body body = parse_body({});
    if (peek().type != T::kEof) fail("unexpected tag '" + peek(1).text + "'", peek(1));
    return body;
  }

 private:
  // --- token helpers ---
  const Token& peek(size_t ahead = 0) const {
    const size_t k = std::min(pos_ + ahead, toks_.size() - 1);
    return toks_[k];
  }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  [[noreturn]] void fail(const std::string& message, const Token& at) const { throw Error(message, at.line, at.column); }
  bool is_op(const char* op, size_t ahead = 0) const { return peek(ahead).type == T::kOp && peek(ahead).text == op; }
  bool is_name(const char* name, size_t ahead = 0) const { return peek(ahead).type == T::kName && peek(ahead).text == name; }
  bool skip_op(const char* op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  static std::string describe(const Token& t) {
    switch (t.type) {
      case T::kEof: return "end of template";
      case T::kVarEnd: return "'}}'";
      case T::kBlockEnd: return "'%}'";
      case T::kText: return "template text";
      case T::kString: return "string";
      default: return "'" + t.text + "'";
    }
  }
  void expect_op(const char* op) {
    if (!skip_op(op)) fail(std::string("expected '") + op + "', got " + describe(peek()), peek());
  }
  std::string expect_name() {
    if (peek().type != T::kName) fail("expected a name, got " + describe(peek()), peek());
    return next().text;
  }
  void expect_block_end() {
    if (peek().type != T::kBlockEnd) fail("expected '%}', got " + describe(peek()), peek());
    next();
  }
  struct DepthGuard {
    DepthGuard(Parser* p, const Token& at) : p(p) {
      if (++p->depth_ > p->max_depth_) p->fail("template nested too deeply", at);
    }
    ~DepthGuard() { --p->depth_; }
    Parser* p;
  };
  ExprPtr make(Expr::Kind kind, const Token& at) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = at.line;
    e->column = at.column;
    return e;
  }

  // --- statements ---
  // Parses until a {% NAME %} with NAME in `ends` (left unconsumed, positioned at NAME) or EOF.
  Body parse_body(const std::vector<std::string>& ends) {
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.type == T::kEof) {
        if (!ends.empty()) fail("unexpected end of template, expected '" + ends.back() + "'", t);
        return body;
      }
      if (t.type == T::kText) {
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kText;
        s->line = t.line;
        s->column = t.column;
        s->text = t.text;
        next();
        body.push_back(std::move(s));
      } else if (t.type == T::kVarBegin) {
        next();
        auto s = std::make_unique<Stmt>();
        s->kind = Stmt::Kind::kOutput;
        s->line = t.line;
        s->column = t.column;
        s->exprs.push_back(parse_tuple(true));
        if (peek().type != T::kVarEnd) fail("expected '}}', got " + describe(peek()), peek());
        next();
        body.push_back(std::move(s));
      } else if (t.type == T::kBlockBegin) {
        const Token& name = peek(1);
        if (name.type != T::kName) fail("expected a statement name, got " + describe(name), name);
        for (const std::string& e : ends) {
          if (name.text == e) {
            next();  // BlockBegin; the caller consumes the name
            return body;
          }
        }
        next();
        body.push_back(parse_statement());
      } else {
        fail("unexpected " + describe(t), t);
      }
    }
  }

  std::unique_ptr<Stmt> parse_statement() {
    const Token& t = next();  // the statement name
    DepthGuard guard(this, t);
    auto s = std::make_unique<Stmt>();
    s->line = t.line;
    s->column = t.column;
    const std::string& kw = t.text;
    if (kw == "if") {
      s->kind = Stmt::Kind::kIf;
      s->exprs.push_back(parse_tuple(false));
      expect_block_end();
      while (true) {
        s->bodies.push_back(parse_body({"elif", "else", "endif"}));
        const std::string which = next().text;
        if (which == "elif") {
          s->exprs.push_back(parse_tuple(false));
          expect_block_end();
        } else if (which == "else") {
          expect_block_end();
          s->bodies.push_back(parse_body({"endif"}));
          next();
          expect_block_end();
          break;
        } else {
          expect_block_end();
          break;
        }
      }
    } else if (kw == "for") {
      s->kind = Stmt::Kind::kFor;
      parse_targets(&s->targets);
      if (!skip_name("in")) fail("expected 'in', got " + describe(peek()), peek());
      s->exprs.push_back(parse_tuple(false, /*with_condexpr=*/false));
      if (skip_name("if")) s->exprs.push_back(parse_tuple(false));
      if (is_name("recursive")) fail("recursive for loops are not supported", peek());
      expect_block_end();
      ++loop_depth_;
      s->bodies.push_back(parse_body({"endfor", "else"}));
      --loop_depth_;
      if (next().text == "else") {
        expect_block_end();
        s->bodies.push_back(parse_body({"endfor"}));
        next();
      }
      expect_block_end();
    } else if (kw == "set") {
      const std::string first = expect_name();
      s->targets.push_back(first);
      if (skip_op(".")) {
        s->attr = expect_name();
      } else {
        while (skip_op(",")) s->targets.push_back(expect_name());
      }
      if (skip_op("=")) {
        s->kind = Stmt::Kind::kSet;
        s->exprs.push_back(parse_tuple(false));
        expect_block_end();
      } else {
        if (!s->attr.empty() || s->targets.size() != 1) fail("expected '='", peek());
        s->kind = Stmt::Kind::kSetBlock;
        if (is_op("|")) s->exprs.push_back(parse_filter_chain(nullptr));
        expect_block_end();
        s->bodies.push_back(parse_body({"endset"}));
        next();
        expect_block_end();
      }
    } else if (kw == "macro") {
      s->kind = Stmt::Kind::kMacro;
      s->targets.push_back(expect_name());
      expect_op("(");
      while (!is_op(")")) {
        if (!s->params.empty()) expect_op(",");
        if (is_op(")")) break;
        s->params.push_back(expect_name());
        s->defaults.push_back(skip_op("=") ? parse_expression() : nullptr);
      }
      expect_op(")");
      expect_block_end();
      const int outer_loops = loop_depth_;
      loop_depth_ = 0;  // a macro body cannot break out of the loop around its definition
      s->bodies.push_back(parse_body({"endmacro"}));
      loop_depth_ = outer_loops;
      next();
      if (peek().type == T::kName) next();  // {% endmacro name %}
      expect_block_end();
    } else if (kw == "break" || kw == "continue") {
      s->kind = kw == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      if (loop_depth_ == 0) fail("'" + kw + "' outside of a for loop", t);
      expect_block_end();
    } else if (kw == "filter") {
      s->kind = Stmt::Kind::kFilterBlock;
      s->exprs.push_back(parse_filter_chain(nullptr, /*leading_bar=*/false));
      expect_block_end();
      s->bodies.push_back(parse_body({"endfilter"}));
      next();
      expect_block_end();
    } else if (kw == "generation") {
      s->kind = Stmt::Kind::kGeneration;
      expect_block_end();
      s->bodies.push_back(parse_body({"endgeneration"}));
      next();
      expect_block_end();
    } else {
      fail("unknown or unsupported statement '" + kw + "'", t);
    }
    return s;
  }

  void parse_targets(std::vector<std::string>* targets) {
    const bool paren = skip_op("(");
    targets->push_back(expect_name());
    while (skip_op(",")) {
      if (peek().type != T::kName) break;
      targets->push_back(expect_name());
    }
    if (paren) expect_op(")");
  }

  // --- expressions ---
  // A comma-separated sequence becomes a tuple (`{{ a, b }}`, `set x = 1, 2`).
  ExprPtr parse_tuple(bool allow_empty_end, bool with_condexpr = true) {
    const Token& at = peek();
    ExprPtr first = with_condexpr ? parse_expression() : parse_or();
    if (!is_op(",")) return first;
    auto tuple = make(Expr::Kind::kTuple, at);
    tuple->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (peek().type == T::kBlockEnd || peek().type == T::kVarEnd) break;
      tuple->args.push_back(with_condexpr ? parse_expression() : parse_or());
    }
    return tuple;
  }

  ExprPtr parse_expression() {
    DepthGuard guard(this, peek());
    ExprPtr e = parse_or();
    while (is_name("if")) {
      const Token& at = next();
      auto cond = make(Expr::Kind::kCondition, at);
      ExprPtr test = parse_or();
      ExprPtr otherwise = skip_name("else") ? parse_expression() : nullptr;
      cond->args.push_back(std::move(test));
      cond->args.push_back(std::move(e));
      cond->args.push_back(std::move(otherwise));
      e = grown(std::move(cond));
    }
    return e;
  }

  // Sets e's height from its operands; a chain like 1+1+1+... grows it by one per operator.
  ExprPtr grown(ExprPtr e) {
    int h = 0;
    for (const auto& a : e->args) if (a) h = std::max(h, a->height);
    for (const auto& kv : e->kwargs) if (kv.second) h = std::max(h, kv.second->height);
    e->height = h + 1;
    if (e->height > Expr::kMaxHeight) throw Error("expression nested too deeply", e->line, e->column);
    return e;
  }

  ExprPtr binary(const Token& at, const std::string& op, ExprPtr a, ExprPtr b) {
    auto e = make(Expr::Kind::kBinary, at);
    e->name = op;
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return grown(std::move(e));
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const Token& at = next();
      e = binary(at, "or", std::move(e), parse_and());
    }
    return e;
  }
  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const Token& at = next();
      e = binary(at, "and", std::move(e), parse_not());
    }
    return e;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      const Token& at = next();
      DepthGuard guard(this, at);
      auto e = make(Expr::Kind::kUnary, at);
      e->name = "not";
      e->args.push_back(parse_not());
      return grown(std::move(e));
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const Token& at = peek();
    ExprPtr first = parse_math1();
    ExprPtr cmp;
    while (true) {
      std::string op;
      if (peek().type == T::kOp && (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
                                    peek().text == "<=" || peek().text == ">" || peek().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (!cmp) {
        cmp = make(Expr::Kind::kCompare, at);
        cmp->args.push_back(std::move(first));
      }
      cmp->ops.push_back(op);
      cmp->args.push_back(parse_math1());
    }
    return cmp ? grown(std::move(cmp)) : std::move(first);
  }
  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& at = next();
      e = binary(at, at.text, std::move(e), parse_concat());
    }
    return e;
  }
  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const Token& at = next();
      e = binary(at, "~", std::move(e), parse_math2());
    }
    return e;
  }
  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& at = next();
      e = binary(at, at.text, std::move(e), parse_pow());
    }
    return e;
  }
  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const Token& at = next();
      e = binary(at, "**", std::move(e), parse_unary(true));
    }
    return e;
  }
  ExprPtr parse_unary(bool with_filter) {
    const Token& at = peek();
    DepthGuard guard(this, at);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      next();
      e = make(Expr::Kind::kUnary, at);
      e->name = at.text;
      e->args.push_back(parse_unary(false));
      e = grown(std::move(e));
    } else {
      e = parse_postfix(parse_primary());
    }
    if (with_filter) e = parse_filter_chain(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    switch (t.type) {
      case T::kName: {
        next();
        if (t.text == "true" || t.text == "True") return literal(t, Value::boolean(true));
        if (t.text == "false" || t.text == "False") return literal(t, Value::boolean(false));
        if (t.text == "none" || t.text == "None") return literal(t, Value::none());
        auto e = make(Expr::Kind::kName, t);
        e->name = t.text;
        return e;
      }
      case T::kString: {
        std::string s;
        while (peek().type == T::kString) s += next().text;  // adjacent literals concatenate
        return literal(t, Value::string(std::move(s)));
      }
      case T::kInt: {
        next();
        int64_t v = 0;
        auto r = std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
        if (r.ec != std::errc()) return literal(t, Value::number(std::strtod(t.text.c_str(), nullptr)));
        return literal(t, Value::integer(v));
      }
      case T::kFloat:
        next();
        return literal(t, Value::number(std::strtod(t.text.c_str(), nullptr)));
      case T::kOp:
        if (t.text == "(") {
          next();
          if (skip_op(")")) return make(Expr::Kind::kTuple, t);
          ExprPtr first = parse_expression();
          if (skip_op(")")) return first;
          auto tuple = make(Expr::Kind::kTuple, t);
          tuple->args.push_back(std::move(first));
          while (skip_op(",")) {
            if (is_op(")")) break;
            tuple->args.push_back(parse_expression());
          }
          expect_op(")");
          return tuple;
        }
        if (t.text == "[") {
          next();
          auto list = make(Expr::Kind::kList, t);
          while (!is_op("]")) {
            if (!list->args.empty()) expect_op(",");
            if (is_op("]")) break;
            list->args.push_back(parse_expression());
          }
          expect_op("]");
          return list;
        }
        if (t.text == "{") {
          next();
          auto dict = make(Expr::Kind::kDict, t);
          while (!is_op("}")) {
            if (!dict->args.empty()) expect_op(",");
            if (is_op("}")) break;
            dict->args.push_back(parse_expression());
            expect_op(":");
            dict->args.push_back(parse_expression());
          }
          expect_op("}");
          return dict;
        }
        break;
      default: break;
    }
    fail("unexpected " + describe(t), t);
  }
  ExprPtr literal(const Token& at, Value v) {
    auto e = make(Expr::Kind::kLiteral, at);
    e->literal = std::move(v);
    return e;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      const Token& at = peek();
      if (is_op(".")) {
        next();
        const Token& t = next();
        if (t.type == T::kName) {
          auto g = make(Expr::Kind::kGetAttr, at);
          g->name = t.text;
          g->args.push_back(std::move(e));
          e = grown(std::move(g));
        } else if (t.type == T::kInt) {
          auto g = make(Expr::Kind::kGetItem, at);
          g->args.push_back(std::move(e));
          int64_t index = 0;
          if (std::from_chars(t.text.data(), t.text.data() + t.text.size(), index).ec != std::errc()) {
            fail("index too large", t);
          }
          g->args.push_back(literal(t, Value::integer(index)));
          e = grown(std::move(g));
        } else {
          fail("expected an attribute name after '.', got " + describe(t), t);
        }
      } else if (is_op("[")) {
        next();
        e = grown(parse_subscript(std::move(e), at));
      } else if (is_op("(")) {
        e = grown(parse_call(std::move(e)));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr obj, const Token& at) {
    ExprPtr parts[3];
    int colons = 0;
    auto slice_end = [&]() { return is_op(":") || is_op("]") || is_op(","); };
    if (!slice_end()) parts[0] = parse_expression();
    if (is_op(":")) {
      while (colons < 2 && skip_op(":")) {
        ++colons;
        if (!slice_end()) parts[colons] = parse_expression();
      }
    }
    if (colons == 0 && !parts[0]) fail("expected an index", peek());
    if (colons == 0 && is_op(",")) {  // x[a, b]: a tuple key
      auto tuple = make(Expr::Kind::kTuple, at);
      tuple->args.push_back(std::move(parts[0]));
      while (skip_op(",")) {
        if (is_op("]")) break;
        tuple->args.push_back(parse_expression());
      }
      parts[0] = std::move(tuple);
    }
    expect_op("]");
    auto e = make(colons ? Expr::Kind::kSlice : Expr::Kind::kGetItem, at);
    e->args.push_back(std::move(obj));
    if (colons) {
      for (auto& p : parts) e->args.push_back(std::move(p));
    } else {
      e->args.push_back(std::move(parts[0]));
    }
    return e;
  }

  // Fills e->args (after whatever is there) and e->kwargs from "( ... )".
  void parse_call_args(Expr* e) {
    expect_op("(");
    bool any = false;
    while (!is_op(")")) {
      if (any) expect_op(",");
      if (is_op(")")) break;
      any = true;
      if (peek().type == T::kName && is_op("=", 1)) {
        std::string key = next().text;
        next();
        e->kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        if (!e->kwargs.empty()) fail("positional argument after keyword argument", peek());
        e->args.push_back(parse_expression());
      }
    }
    expect_op(")");
  }
  ExprPtr parse_call(ExprPtr callee) {
    auto e = make(Expr::Kind::kCall, peek());
    e->line = callee->line;  // errors raised by the call point at what was called
    e->column = callee->column;
    e->args.push_back(std::move(callee));
    parse_call_args(e.get());
    return e;
  }

  // `| name(args)`, `is [not] name args`, and calls, repeated. node == nullptr: a filter applied
  // later to a block's output ({% filter %}, {% set x | f %}); the placeholder is a null operand.
  ExprPtr parse_filter_chain(ExprPtr node, bool leading_bar = true) {
    bool first = true;
    while (true) {
      const Token& at = peek();
      const bool bar = is_op("|");
      if (bar || (!leading_bar && first)) {
        if (bar) next();
        first = false;
        auto f = make(Expr::Kind::kFilter, peek());
        f->name = expect_name();
        while (skip_op(".")) f->name += "." + expect_name();
        f->args.push_back(std::move(node));
        if (is_op("(")) parse_call_args(f.get());
        node = grown(std::move(f));
      } else if (node && is_name("is")) {
        next();
        auto test = make(Expr::Kind::kTest, at);
        test->negated = skip_name("not");
        test->name = expect_name();
        while (skip_op(".")) test->name += "." + expect_name();
        test->args.push_back(std::move(node));
        if (is_op("(")) {
          parse_call_args(test.get());
        } else if ((peek().type == T::kName && !is_name("else") && !is_name("or") && !is_name("and") &&
                    !is_name("if") && !is_name("in") && !is_name("is") && !is_name("not")) ||
                   peek().type == T::kString || peek().type == T::kInt || peek().type == T::kFloat ||
                   is_op("[") || is_op("{")) {
          test->args.push_back(parse_postfix(parse_primary()));
        }
        node = grown(std::move(test));
      } else if (node && is_op("(")) {
        node = grown(parse_call(std::move(node)));
      } else {
        return node;
      }
    }
  }

  const std::vector<Token>& toks_;
  size_t pos_ = 0;
  int depth_ = 0;
  int max_depth_;
  int loop_depth_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens, int max_depth) { return Parser(tokens, max_depth).parse_template(); }

}  // namespace weft::jinja
