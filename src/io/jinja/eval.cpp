// The tree-walking renderer behind Template::render: scopes as jinja2 has them (a for loop body
// gets a fresh scope each iteration, so `set` inside a loop does not leak; namespace() is the way
// out), macros as closures over the template's top-level scope, break/continue, and limits.
#include <chrono>
#include <cmath>
#include <unordered_map>

#include "io/jinja/builtins.h"
#include "io/jinja/parser.h"
#include "io/jinja/template.h"

namespace weft::jinja {
namespace {

enum class Flow { kNormal, kBreak, kContinue };

class Interpreter {
 public:
  Interpreter(const RenderLimits& limits, const nlohmann::ordered_json& variables) : limits_(limits) {
    ctx_.max_string_bytes = limits.max_output_bytes;
    ctx_.now = limits.now ? *limits.now : std::time(nullptr);
    ctx_.steps = &steps_;
    ctx_.max_steps = limits.max_steps;
    scopes_.emplace_back();
    for (auto& kv : make_globals(&ctx_).items) scopes_[0][kv.first] = kv.second;
    if (variables.is_object()) {
      for (auto it = variables.begin(); it != variables.end(); ++it) scopes_[0][it.key()] = Value::from_json(it.value());
    }
  }

  std::string run(const Body& body) {
    std::string out;
    out_ = &out;
    exec_body(body);
    return out;
  }

 private:
  using Scope = std::unordered_map<std::string, Value>;

  [[noreturn]] static void fail_at(const std::string& message, int line, int column) { throw Error(message, line, column); }
  void step(int line, int column) {
    if (++steps_ > limits_.max_steps) fail_at("template step limit exceeded (" + std::to_string(limits_.max_steps) + ")", line, column);
  }
  void emit(const std::string& s) {
    out_->append(s);
    ctx_.check_size(out_->size());
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    return Value::undefined("'" + name + "' is undefined");
  }
  void assign(const std::string& name, Value v) { scopes_.back()[name] = std::move(v); }

  // Errors from builtins carry no position; the innermost statement or expression adds it.
  template <typename Fn>
  auto at(int line, int column, Fn&& fn) -> decltype(fn()) {
    try {
      return fn();
    } catch (Error& e) {
      if (e.line == 0) {
        e.line = line;
        e.column = column;
      }
      throw;
    }
  }

  // --- statements ---
  Flow exec_body(const Body& body) {
    for (const auto& s : body) {
      const Flow f = exec(*s);
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  Flow exec(const Stmt& s) {
    step(s.line, s.column);
    return at(s.line, s.column, [&]() -> Flow {
      switch (s.kind) {
        case Stmt::Kind::kText: emit(s.text); return Flow::kNormal;
        case Stmt::Kind::kOutput: emit(eval(*s.exprs[0]).to_str()); return Flow::kNormal;
        case Stmt::Kind::kIf:
          for (size_t k = 0; k < s.exprs.size(); ++k) {
            if (eval(*s.exprs[k]).truthy()) return exec_body(s.bodies[k]);
          }
          if (s.bodies.size() > s.exprs.size()) return exec_body(s.bodies.back());
          return Flow::kNormal;
        case Stmt::Kind::kFor: exec_for(s); return Flow::kNormal;
        case Stmt::Kind::kSet: exec_set(s); return Flow::kNormal;
        case Stmt::Kind::kSetBlock: {
          Value v = Value::string(capture(s.bodies[0]));
          if (!s.exprs.empty()) v = apply_filters(*s.exprs[0], v);
          assign(s.targets[0], std::move(v));
          return Flow::kNormal;
        }
        case Stmt::Kind::kMacro: assign(s.targets[0], make_macro(s)); return Flow::kNormal;
        case Stmt::Kind::kBreak: return Flow::kBreak;
        case Stmt::Kind::kContinue: return Flow::kContinue;
        case Stmt::Kind::kFilterBlock: emit(apply_filters(*s.exprs[0], Value::string(capture(s.bodies[0]))).to_str()); return Flow::kNormal;
        case Stmt::Kind::kGeneration: return exec_body(s.bodies[0]);
      }
      return Flow::kNormal;
    });
  }

  std::string capture(const Body& body) {
    std::string buf;
    std::string* saved = out_;
    out_ = &buf;
    try {
      exec_body(body);
    } catch (...) {
      out_ = saved;
      throw;
    }
    out_ = saved;
    return buf;
  }

  void bind_targets(const std::vector<std::string>& targets, const Value& v) {
    if (targets.size() == 1) {
      assign(targets[0], v);
      return;
    }
    ValueList items = iterate(v);
    if (items.size() != targets.size()) {
      throw Error(items.size() < targets.size() ? "not enough values to unpack (expected " + std::to_string(targets.size()) + ", got " + std::to_string(items.size()) + ")"
                                                : "too many values to unpack (expected " + std::to_string(targets.size()) + ")");
    }
    for (size_t k = 0; k < targets.size(); ++k) assign(targets[k], items[k]);
  }

  void exec_set(const Stmt& s) {
    Value v = eval(*s.exprs[0]);
    if (!s.attr.empty()) {
      Value target = lookup(s.targets[0]);
      if (target.kind != Value::Kind::kNamespace) throw Error("cannot assign attribute on non-namespace object");
      if (holds_namespace(v)) throw Error("a namespace cannot hold another namespace");
      if (v.depth + 1 > Value::kMaxValueDepth) throw Error("value nested too deeply");
      target.dict->set(s.attr, std::move(v));
      return;
    }
    bind_targets(s.targets, v);
  }

  void exec_for(const Stmt& s) {
    const Value iterable = eval(*s.exprs[0]);
    ctx_.charge(work_of(iterable));
    ValueList items = iterate(iterable);
    if (s.exprs.size() > 1) {  // `for x in xs if cond`: filtered before the loop, so loop.length counts the kept items
      ValueList kept;
      for (const Value& item : items) {
        step(s.line, s.column);
        scopes_.emplace_back();
        bind_targets(s.targets, item);
        const bool keep = eval(*s.exprs[1]).truthy();
        scopes_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      if (s.bodies.size() > 1) exec_body(s.bodies[1]);
      return;
    }
    const int64_t n = static_cast<int64_t>(items.size());
    for (int64_t k = 0; k < n; ++k) {
      step(s.line, s.column);
      scopes_.emplace_back();
      Dict loop;
      loop.set("index", Value::integer(k + 1));
      loop.set("index0", Value::integer(k));
      loop.set("revindex", Value::integer(n - k));
      loop.set("revindex0", Value::integer(n - k - 1));
      loop.set("first", Value::boolean(k == 0));
      loop.set("last", Value::boolean(k == n - 1));
      loop.set("length", Value::integer(n));
      loop.set("depth", Value::integer(1));
      loop.set("depth0", Value::integer(0));
      loop.set("previtem", k > 0 ? items[static_cast<size_t>(k - 1)] : Value::undefined("there is no previous item"));
      loop.set("nextitem", k + 1 < n ? items[static_cast<size_t>(k + 1)] : Value::undefined("there is no next item"));
      loop.set("cycle", Value::function([k](const CallArgs& a) {
        if (a.positional.empty()) throw Error("no items for cycling given");
        return a.positional[static_cast<size_t>(k) % a.positional.size()];
      }));
      assign("loop", Value::make_dict(std::move(loop)));
      bind_targets(s.targets, items[static_cast<size_t>(k)]);
      Flow f;
      try {
        f = exec_body(s.bodies[0]);
      } catch (...) {
        scopes_.pop_back();
        throw;
      }
      scopes_.pop_back();
      if (f == Flow::kBreak) break;
    }
  }

  Value make_macro(const Stmt& s) {
    const Stmt* def = &s;
    return Value::function([this, def](const CallArgs& a) { return call_macro(*def, a); });
  }

  Value call_macro(const Stmt& def, const CallArgs& a) {
    if (++call_depth_ > limits_.max_call_depth) {
      --call_depth_;
      throw Error("macro calls nested too deeply (limit " + std::to_string(limits_.max_call_depth) + ")");
    }
    step(def.line, def.column);
    if (a.positional.size() > def.params.size()) {
      --call_depth_;
      throw Error("macro '" + def.targets[0] + "' takes not more than " + std::to_string(def.params.size()) + " argument(s)");
    }
    // The body sees the template's top-level names and its own arguments, not the caller's locals.
    std::vector<Scope> saved = std::move(scopes_);
    scopes_.clear();
    scopes_.push_back(saved.front());
    scopes_.emplace_back();
    std::string result;
    try {
      for (const auto& kv : a.keyword) {
        if (std::find(def.params.begin(), def.params.end(), kv.first) == def.params.end()) {
          throw Error("macro '" + def.targets[0] + "' takes no keyword argument '" + kv.first + "'");
        }
      }
      for (size_t k = 0; k < def.params.size(); ++k) {
        const Value* v = a.get(k, def.params[k].c_str());
        if (v) assign(def.params[k], *v);
        else if (def.defaults[k]) assign(def.params[k], eval(*def.defaults[k]));
        else assign(def.params[k], Value::undefined("'" + def.params[k] + "' is undefined"));
      }
      result = capture(def.bodies[0]);
    } catch (...) {
      // Top-level assignments made while the macro ran stay (namespace objects are shared anyway).
      saved.front() = std::move(scopes_.front());
      scopes_ = std::move(saved);
      --call_depth_;
      throw;
    }
    saved.front() = std::move(scopes_.front());
    scopes_ = std::move(saved);
    --call_depth_;
    return Value::string(std::move(result));
  }

  // --- expressions ---
  CallArgs eval_args(const Expr& e, size_t first) {
    CallArgs a;
    for (size_t k = first; k < e.args.size(); ++k) a.positional.push_back(eval(*e.args[k]));
    for (const auto& kv : e.kwargs) a.keyword.emplace_back(kv.first, eval(*kv.second));
    return a;
  }

  // A filter chain parsed with a null innermost operand, applied to `input`.
  Value apply_filters(const Expr& e, const Value& input) {
    if (e.kind != Expr::Kind::kFilter) return eval(e);
    const Value operand = e.args[0] ? apply_filters(*e.args[0], input) : input;
    ctx_.charge(1 + work_of(operand));
    return at(e.line, e.column, [&] { return call_filter(ctx_, e.name, operand, eval_args(e, 1)); });
  }

  Value eval(const Expr& e) {
    return at(e.line, e.column, [&]() -> Value {
      switch (e.kind) {
        case Expr::Kind::kLiteral: return e.literal;
        case Expr::Kind::kName: return lookup(e.name);
        case Expr::Kind::kList:
        case Expr::Kind::kTuple: {
          ValueList items;
          for (const auto& x : e.args) items.push_back(eval(*x));
          return Value::make_list(std::move(items), e.kind == Expr::Kind::kTuple);
        }
        case Expr::Kind::kDict: {
          Dict d;
          for (size_t k = 0; k + 1 < e.args.size(); k += 2) {
            Value key = eval(*e.args[k]);
            if (!key.is_string()) throw Error("dict keys must be strings here");
            d.set(key.str(), eval(*e.args[k + 1]));
          }
          return Value::make_dict(std::move(d));
        }
        case Expr::Kind::kGetAttr: return get_attribute(ctx_, eval(*e.args[0]), e.name);
        case Expr::Kind::kGetItem: return get_item(ctx_, eval(*e.args[0]), eval(*e.args[1]));
        case Expr::Kind::kSlice: {
          Value obj = eval(*e.args[0]);
          auto part = [&](size_t k) { return e.args[k] ? eval(*e.args[k]) : Value::none(); };
          return slice(obj, part(1), part(2), part(3));
        }
        case Expr::Kind::kCall: {
          Value callee = eval(*e.args[0]);
          if (callee.is_undefined()) raise_undefined(callee);
          if (callee.kind != Value::Kind::kFunction) throw Error(std::string("'") + callee.type_name() + "' object is not callable");
          CallArgs a = eval_args(e, 1);
          int64_t work = 1;
          for (const Value& v : a.positional) work += work_of(v);
          ctx_.charge(work);
          return (*callee.fn)(a);
        }
        case Expr::Kind::kFilter: {
          Value operand = eval(*e.args[0]);
          ctx_.charge(1 + work_of(operand));
          return call_filter(ctx_, e.name, operand, eval_args(e, 1));
        }
        case Expr::Kind::kTest: {
          const bool r = call_test(ctx_, e.name, eval(*e.args[0]), eval_args(e, 1));
          return Value::boolean(e.negated ? !r : r);
        }
        case Expr::Kind::kUnary: {
          Value v = eval(*e.args[0]);
          if (e.name == "not") return Value::boolean(!v.truthy());
          if (v.is_undefined()) raise_undefined(v);
          if (v.kind == Value::Kind::kFloat) return Value::number(e.name == "-" ? -v.f : v.f);
          if (v.kind == Value::Kind::kInt || v.kind == Value::Kind::kBool) {
            const int64_t x = v.kind == Value::Kind::kInt ? v.i : v.b;
            if (e.name == "-" && x == INT64_MIN) throw Error("integer overflow");
            return Value::integer(e.name == "-" ? -x : x);
          }
          throw Error(std::string("bad operand type for unary ") + e.name + ": '" + v.type_name() + "'");
        }
        case Expr::Kind::kBinary: return eval_binary(e);
        case Expr::Kind::kCompare: {
          Value left = eval(*e.args[0]);
          for (size_t k = 0; k < e.ops.size(); ++k) {
            Value right = eval(*e.args[k + 1]);
            const std::string& op = e.ops[k];
            bool r;
            if (op == "==") r = values_equal(left, right);
            else if (op == "!=") r = !values_equal(left, right);
            else if (op == "in" || op == "not in") {
              ctx_.charge(1 + work_of(right));
              r = contains(right, left) == (op == "in");
            }
            else {
              if (left.is_undefined()) raise_undefined(left);
              if (right.is_undefined()) raise_undefined(right);
              const int c = compare_values(left, right);
              r = op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0;
            }
            if (!r) return Value::boolean(false);
            left = std::move(right);
          }
          return Value::boolean(true);
        }
        case Expr::Kind::kCondition:
          if (eval(*e.args[0]).truthy()) return eval(*e.args[1]);
          return e.args[2] ? eval(*e.args[2]) : Value::undefined("the inline if-expression evaluated to false and no else section was defined.");
      }
      return Value();
    });
  }

  Value eval_binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value a = eval(*e.args[0]);
      return a.truthy() ? eval(*e.args[1]) : a;
    }
    if (op == "or") {
      Value a = eval(*e.args[0]);
      return a.truthy() ? a : eval(*e.args[1]);
    }
    Value a = eval(*e.args[0]);
    Value b = eval(*e.args[1]);
    if (op == "~") {
      std::string s = a.to_str() + b.to_str();
      ctx_.check_size(s.size());
      return Value::string(std::move(s));
    }
    if (a.is_undefined()) raise_undefined(a);
    if (b.is_undefined()) raise_undefined(b);
    auto type_error = [&]() -> Error {
      return Error("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
    };
    if (op == "+") {
      if (a.is_string() && b.is_string()) {
        ctx_.check_size(a.str().size() + b.str().size());
        return Value::string(a.str() + b.str());
      }
      if (a.is_list() && b.is_list() && a.is_tuple == b.is_tuple) {
        ctx_.check_size((a.list->size() + b.list->size()) * 64);  // an element costs ~64 bytes
        ValueList out = *a.list;
        out.insert(out.end(), b.list->begin(), b.list->end());
        return Value::make_list(std::move(out), a.is_tuple);
      }
    }
    if (op == "*" && ((a.is_string() || a.is_list()) != (b.is_string() || b.is_list()))) {  // repetition
      const Value& seq = a.is_string() || a.is_list() ? a : b;
      const Value& times = a.is_string() || a.is_list() ? b : a;
      if (times.kind != Value::Kind::kInt && times.kind != Value::Kind::kBool) throw type_error();
      const int64_t n = std::max<int64_t>(0, times.kind == Value::Kind::kInt ? times.i : times.b);
      const size_t unit = seq.is_string() ? seq.str().size() : seq.list->size() * 64;
      if (unit && static_cast<double>(n) * static_cast<double>(unit) > static_cast<double>(ctx_.max_string_bytes)) ctx_.check_size(ctx_.max_string_bytes + 1);
      if (seq.is_string()) {
        std::string out;
        for (int64_t k = 0; k < n; ++k) out += seq.str();
        return Value::string(std::move(out));
      }
      ValueList out;
      for (int64_t k = 0; k < n; ++k) out.insert(out.end(), seq.list->begin(), seq.list->end());
      return Value::make_list(std::move(out), seq.is_tuple);
    }
    if (!a.is_number() || !b.is_number()) {
      if (op == "%" && a.is_string()) throw Error("printf-style string formatting ('%') is not supported");
      throw type_error();
    }
    const bool ints = a.kind != Value::Kind::kFloat && b.kind != Value::Kind::kFloat;
    const int64_t x = a.kind == Value::Kind::kInt ? a.i : a.b, y = b.kind == Value::Kind::kInt ? b.i : b.b;
    const double fx = a.kind == Value::Kind::kFloat ? a.f : static_cast<double>(x);
    const double fy = b.kind == Value::Kind::kFloat ? b.f : static_cast<double>(y);
    int64_t r = 0;
    if (op == "+") {
      if (!ints) return Value::number(fx + fy);
      if (__builtin_add_overflow(x, y, &r)) throw Error("integer overflow");
      return Value::integer(r);
    }
    if (op == "-") {
      if (!ints) return Value::number(fx - fy);
      if (__builtin_sub_overflow(x, y, &r)) throw Error("integer overflow");
      return Value::integer(r);
    }
    if (op == "*") {
      if (!ints) return Value::number(fx * fy);
      if (__builtin_mul_overflow(x, y, &r)) throw Error("integer overflow");
      return Value::integer(r);
    }
    if (op == "/") {
      if (fy == 0) throw Error("division by zero");
      return Value::number(fx / fy);
    }
    if (op == "//" || op == "%") {
      if (ints ? y == 0 : fy == 0) throw Error(op == "//" ? "integer division or modulo by zero" : "modulo by zero");
      if (ints) {
        if (x == INT64_MIN && y == -1) throw Error("integer overflow");
        int64_t q = x / y, m = x % y;
        if (m != 0 && ((m < 0) != (y < 0))) {  // Python floors toward negative infinity
          --q;
          m += y;
        }
        return Value::integer(op == "//" ? q : m);
      }
      // Python's float divmod: fmod, sign fix-up, then a floored quotient.
      double m = std::fmod(fx, fy);
      double div = (fx - m) / fy;
      if (m != 0 && ((fy < 0) != (m < 0))) {
        m += fy;
        div -= 1.0;
      }
      if (op == "%") return Value::number(m);
      double floordiv = std::floor(div);
      if (div - floordiv > 0.5) floordiv += 1.0;
      return Value::number(floordiv);
    }
    if (op == "**") {
      if (ints && y >= 0) {  // square-and-multiply; any overflow is an error, not a wrap
        int64_t acc = 1, base = x, e = y;
        while (e > 0) {
          if ((e & 1) && __builtin_mul_overflow(acc, base, &acc)) throw Error("integer overflow");
          e >>= 1;
          if (e > 0 && __builtin_mul_overflow(base, base, &base)) throw Error("integer overflow");
        }
        return Value::integer(acc);
      }
      if (fx == 0 && fy < 0) throw Error("0.0 cannot be raised to a negative power");
      return Value::number(std::pow(fx, fy));
    }
    throw type_error();
  }

  RenderLimits limits_;
  RenderContext ctx_;
  std::vector<Scope> scopes_;
  std::string* out_ = nullptr;
  int64_t steps_ = 0;
  int call_depth_ = 0;
};

}  // namespace

Result<std::shared_ptr<const Template>> Template::parse(const std::string& source) {
  try {
    auto t = std::shared_ptr<Template>(new Template());
    t->body_ = jinja::parse(lex(source));
    return std::shared_ptr<const Template>(std::move(t));
  } catch (const Error& e) {
    return Status::error("template syntax error at " + std::to_string(e.line) + ":" + std::to_string(e.column) + ": " + e.what());
  } catch (const std::exception& e) {  // e.g. std::bad_alloc: still an error, never a crash
    return Status::error(std::string("template syntax error: ") + e.what());
  }
}

Result<std::string> Template::render(const nlohmann::ordered_json& variables, const RenderLimits& limits) const {
  try {
    Interpreter interp(limits, variables);
    return interp.run(body_);
  } catch (const Error& e) {
    std::string where = e.line ? " at " + std::to_string(e.line) + ":" + std::to_string(e.column) : std::string();
    return Status::error("template error" + where + ": " + e.what());
  } catch (const std::exception& e) {
    return Status::error(std::string("template error: ") + e.what());
  }
}

}  // namespace weft::jinja
