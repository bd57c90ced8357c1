// The tree-walking interpreter: scopes as Jinja2 keeps them (a for loop's body and a
// macro's body get their own; if blocks do not), output collected as a provenance-
// carrying Str, and every failure turned into a TemplateError at the node it came from.
#include "tokenizer/jinja/template.h"

#include <algorithm>
#include <cmath>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"

namespace ridge::jinja {

namespace {

std::string error_message(TemplateError::Kind kind, std::string_view name, Location where, std::string_view detail) {
  if (kind == TemplateError::Kind::kRaised)
    return str_cat(name, " raised an error (line ", where.line, ", column ", where.column, "): ", detail);
  return str_cat(name, ", line ", where.line, ", column ", where.column, ": ",
                 kind == TemplateError::Kind::kSyntax ? "syntax error: " : "", detail);
}

}  // namespace

TemplateError::TemplateError(Kind kind, std::string_view template_name, Location where, std::string_view detail)
    : Error(error_message(kind, template_name, where, detail)), kind_(kind), where_(where), detail_(detail) {}

namespace {

constexpr int kMaxCallDepth = 256;
constexpr size_t kMaxListItems = size_t{1} << 24;
// Work a render may do, in steps: one per statement, expression or loop iteration, plus
// one per list item or 4 KiB of string copied by + and * (a step costs about as much as
// copying that). 2M take about 3 s; real templates stay far below (Qwen2.5's renders 4000
// messages in 0.05 s), where nested range(100000) loops would run for hours.
constexpr uint64_t kMaxSteps = 2'000'000;
constexpr size_t kStrBytesPerStep = 4096;

struct Scope {
  std::vector<std::pair<std::string, Value>> vars;
  const Scope* parent = nullptr;

  const Value* find(std::string_view name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent)
      for (auto it = s->vars.rbegin(); it != s->vars.rend(); ++it)
        if (it->first == name) return &it->second;
    return nullptr;
  }
  void set(const std::string& name, Value v) {
    for (auto& [k, value] : vars)
      if (k == name) {
        value = std::move(v);
        return;
      }
    vars.emplace_back(name, std::move(v));
  }
};

enum class Flow { kNormal, kBreak, kContinue };

class Interpreter {
 public:
  Interpreter(const Dict& variables, std::string_view name) : variables_(variables), name_(name) {}

  // Namespaces are the only values a template can change, so the only way to make a
  // reference cycle ({% set ns.me = ns %}); emptying the ones it changed breaks them all.
  ~Interpreter() {
    for (const auto& ns : assigned_namespaces_) ns->entries.clear();
  }

  Str render(const Body& body) {
    Str out;
    root_.parent = nullptr;
    exec_body(body, root_, out);
    return out;
  }

 private:
  [[noreturn]] void error(Location where, std::string_view what) const {
    throw TemplateError(TemplateError::Kind::kRender, name_, where, what);
  }
  // Runs f, turning a builtin's Failure into a TemplateError located at `where`.
  template <class F>
  auto located(Location where, F&& f) -> decltype(f()) {
    try {
      return f();
    } catch (const Failure& failure) {
      throw TemplateError(failure.raised ? TemplateError::Kind::kRaised : TemplateError::Kind::kRender, name_, where,
                          failure.message);
    }
  }

  // --- statements ---

  Flow exec_body(const Body& body, Scope& scope, Str& out) {
    for (const auto& node : body) {
      const Flow f = located(node->where, [&] { return exec(*node, scope, out); });
      if (f != Flow::kNormal) return f;
    }
    return Flow::kNormal;
  }

  void charge(uint64_t steps) {
    steps_ += steps;
    if (steps_ > kMaxSteps)
      fail(str_cat("the template did more than ", kMaxSteps, " steps of work (an endless or enormous loop?)"));
  }

  Flow exec(const Node& n, Scope& scope, Str& out) {
    charge(1);
    switch (n.kind) {
      case NodeKind::kText: out.append_markup(n.text); return Flow::kNormal;
      case NodeKind::kOutput: {
        const Value v = eval(*n.expr, scope);
        if (!v.is_undefined()) out.append(to_str(v));
        return Flow::kNormal;
      }
      case NodeKind::kIf:
        for (const IfBranch& b : n.branches)
          if (eval(*b.condition, scope).truthy()) return exec_body(b.body, scope, out);
        return exec_body(n.else_body, scope, out);
      case NodeKind::kFor: return exec_for(n, scope, out);
      case NodeKind::kSet: exec_set(n, scope); return Flow::kNormal;
      case NodeKind::kSetBlock: {
        Str captured;
        Scope inner{{}, &scope};
        exec_body(n.body, inner, captured);
        Value v(std::move(captured));
        if (n.expr) v = filter_body(*n.expr, v, scope);
        scope.set(n.targets[0], std::move(v));
        return Flow::kNormal;
      }
      case NodeKind::kMacro: scope.set(n.text, make_macro(n, nullptr)); return Flow::kNormal;
      case NodeKind::kCallBlock: {
        // The body becomes `caller` inside the called macro.
        Value caller = make_macro(n, &scope);
        out.append(to_str(call(*n.expr, scope, &caller)));
        return Flow::kNormal;
      }
      case NodeKind::kFilterBlock: {
        Str captured;
        Scope inner{{}, &scope};
        exec_body(n.body, inner, captured);
        out.append(to_str(filter_body(*n.expr, Value(std::move(captured)), scope)));
        return Flow::kNormal;
      }
      case NodeKind::kBreak: return Flow::kBreak;
      case NodeKind::kContinue: return Flow::kContinue;
      case NodeKind::kScope: return exec_body(n.body, scope, out);
    }
    return Flow::kNormal;
  }

  // Evaluates a filter chain written over the name "" with `value` bound to it.
  Value filter_body(const Expr& chain, Value value, Scope& scope) {
    Scope holder{{{"", std::move(value)}}, &scope};
    return eval(chain, holder);
  }

  void bind_targets(const std::vector<std::string>& targets, const Value& v, Scope& scope, Location where) {
    if (targets.size() == 1) {
      scope.set(targets[0], v);
      return;
    }
    const List items = located(where, [&] { return iterate(v); });
    if (items.size() != targets.size())
      error(where, str_cat("cannot unpack ", items.size(), " values into ", targets.size(), " names"));
    for (size_t i = 0; i < targets.size(); ++i) scope.set(targets[i], items[i]);
  }

  Flow exec_for(const Node& n, Scope& scope, Str& out) {
    const Value iterable = eval(*n.expr, scope);
    if (iterable.is_none()) error(n.expr->where, "'NoneType' object is not iterable");
    List items = located(n.expr->where, [&] { return iterate(iterable); });
    if (n.condition) {
      List kept;
      for (const Value& item : items) {
        Scope probe{{}, &scope};
        bind_targets(n.targets, item, probe, n.where);
        if (eval(*n.condition, probe).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      Scope inner{{}, &scope};
      exec_body(n.else_body, inner, out);
      return Flow::kNormal;
    }
    const auto length = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < length; ++i) {
      charge(1);  // an empty body is work too
      Scope inner{{}, &scope};
      auto loop = std::make_shared<Dict>();
      auto set = [&](const char* k, Value v) { loop->entries.emplace_back(Str::markup(k), std::move(v)); };
      set("index0", Value(i));
      set("index", Value(i + 1));
      set("revindex0", Value(length - i - 1));
      set("revindex", Value(length - i));
      set("first", Value(i == 0));
      set("last", Value(i == length - 1));
      set("length", Value(length));
      set("depth", Value(1));
      set("depth0", Value(0));
      if (i > 0) set("previtem", items[static_cast<size_t>(i - 1)]);
      if (i + 1 < length) set("nextitem", items[static_cast<size_t>(i + 1)]);
      inner.set("loop", Value(loop));
      bind_targets(n.targets, items[static_cast<size_t>(i)], inner, n.where);
      const Flow f = exec_body(n.body, inner, out);
      if (f == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  void exec_set(const Node& n, Scope& scope) {
    Value v = eval(*n.expr, scope);
    if (n.attribute.empty()) {
      bind_targets(n.targets, v, scope, n.where);
      return;
    }
    const Value* target = lookup_existing(n.targets[0], scope);
    if (target == nullptr || !target->is_dict() || !target->as_dict().is_namespace)
      error(n.where, str_cat("cannot assign attribute on non-namespace object '", n.targets[0], "'"));
    if (std::find(assigned_namespaces_.begin(), assigned_namespaces_.end(), target->dict_ptr()) == assigned_namespaces_.end())
      assigned_namespaces_.push_back(target->dict_ptr());
    target->mutable_dict().set(Str::markup(n.attribute), std::move(v));
  }

  // --- macros ---

  // A macro (or, with `call_scope`, the body of a {% call %} block, which sees the
  // variables where it is written).
  Value make_macro(const Node& n, const Scope* call_scope) {
    auto f = std::make_shared<Function>();
    f->name = n.kind == NodeKind::kMacro ? n.text : "caller";
    f->is_macro = true;
    const Node* node = &n;
    f->call = [this, node, call_scope](CallArgs& args) -> Value {
      if (++depth_ > kMaxCallDepth) fail(str_cat("macro calls nested deeper than ", kMaxCallDepth));
      Scope scope{{}, call_scope != nullptr ? call_scope : &root_};
      size_t next_positional = 0;
      for (const Param& p : node->params) {
        Value v;
        bool given = false;
        for (const auto& [k, kv] : args.keyword)
          if (k == p.name) v = kv, given = true;
        if (!given && next_positional < args.positional.size()) v = args.positional[next_positional++], given = true;
        if (!given) v = p.default_value ? eval(*p.default_value, scope) : Value::undefined(str_cat("'", p.name, "' is undefined"));
        scope.set(p.name, std::move(v));
      }
      List varargs(args.positional.begin() + static_cast<std::ptrdiff_t>(std::min(next_positional, args.positional.size())),
                   args.positional.end());
      scope.set("varargs", Value(std::move(varargs)));
      auto kwargs = std::make_shared<Dict>();
      for (const auto& [k, kv] : args.keyword) {
        bool is_param = false;
        for (const Param& p : node->params) is_param = is_param || p.name == k;
        if (!is_param && k != "caller") kwargs->set(Str::markup(k), kv);
      }
      scope.set("kwargs", Value(kwargs));
      for (const auto& [k, kv] : args.keyword)
        if (k == "caller") scope.set("caller", kv);
      Str out;
      exec_body(node->body, scope, out);
      --depth_;
      return Value(std::move(out));
    };
    return Value(std::shared_ptr<const Function>(std::move(f)));
  }

  // --- expressions ---

  const Value* lookup_existing(const std::string& name, const Scope& scope) const {
    if (const Value* v = scope.find(name)) return v;
    return variables_.find(name);
  }

  Value lookup(const std::string& name, const Scope& scope) const {
    if (const Value* v = lookup_existing(name, scope)) return *v;
    return global_function(name);
  }

  Value eval(const Expr& e, Scope& scope) {
    return located(e.where, [&] { return eval_node(e, scope); });
  }

  CallArgs eval_args(const std::vector<Argument>& args, Scope& scope) {
    CallArgs out;
    for (const Argument& a : args) {
      if (a.name.empty()) out.positional.push_back(eval(*a.value, scope));
      else out.keyword.emplace_back(a.name, eval(*a.value, scope));
    }
    return out;
  }

  Value call(const Expr& e, Scope& scope, const Value* caller) {
    const Value callee = eval(*e.object, scope);
    CallArgs args = eval_args(e.args, scope);
    if (caller != nullptr) args.keyword.emplace_back("caller", *caller);
    if (callee.is_undefined()) fail_undefined(callee);
    if (!callee.is_function()) fail(str_cat("'", callee.type_name(), "' object is not callable"));
    return callee.as_function().call(args);
  }

  Value eval_node(const Expr& e, Scope& scope) {
    charge(1);
    switch (e.kind) {
      case ExprKind::kLiteral: return e.value;
      case ExprKind::kName: return lookup(e.name, scope);
      case ExprKind::kList:
      case ExprKind::kTuple: {
        List items;
        for (const auto& item : e.items) items.push_back(eval(*item, scope));
        return Value(std::move(items));
      }
      case ExprKind::kDict: {
        auto d = std::make_shared<Dict>();
        for (size_t i = 0; i + 1 < e.items.size(); i += 2) {
          const Value key = eval(*e.items[i], scope);
          if (!key.is_string()) fail("dict keys in chat templates must be strings");
          d->set(key.as_str(), eval(*e.items[i + 1], scope));
        }
        return Value(d);
      }
      case ExprKind::kAttribute: return get_attribute(eval(*e.object, scope), e.name);
      case ExprKind::kSubscript: return get_item(eval(*e.object, scope), eval(*e.left, scope));
      case ExprKind::kSlice: {
        const Value object = eval(*e.object, scope);
        return get_slice(object, e.start ? eval(*e.start, scope) : Value(), e.stop ? eval(*e.stop, scope) : Value(),
                         e.step ? eval(*e.step, scope) : Value());
      }
      case ExprKind::kCall: return call(e, scope, nullptr);
      case ExprKind::kFilter: {
        const Value v = eval(*e.object, scope);
        return apply_filter(e.name, v, eval_args(e.args, scope));
      }
      case ExprKind::kTest: {
        const Value v = eval(*e.object, scope);
        const bool r = apply_test(e.name, v, eval_args(e.args, scope));
        return Value(e.negated ? !r : r);
      }
      case ExprKind::kUnary: {
        const Value v = eval(*e.object, scope);
        if (e.name == "not") return Value(!v.truthy());
        if (v.is_undefined()) fail_undefined(v);
        if (!v.is_number()) fail(str_cat("bad operand type for unary ", e.name, ": '", v.type_name(), "'"));
        if (e.name == "+") return v.is_float() ? v : Value(v.as_int());
        return v.is_float() ? Value(-v.as_double()) : Value(-v.as_int());
      }
      case ExprKind::kCondition:
        if (eval(*e.condition, scope).truthy()) return eval(*e.then_expr, scope);
        return e.else_expr ? eval(*e.else_expr, scope) : Value::undefined("the condition was false and there is no else");
      case ExprKind::kBinary: return eval_binary(e, scope);
    }
    return Value();
  }

  Value eval_binary(const Expr& e, Scope& scope) {
    const std::string& op = e.name;
    if (op == "and") {
      Value l = eval(*e.left, scope);
      return l.truthy() ? eval(*e.right, scope) : l;
    }
    if (op == "or") {
      Value l = eval(*e.left, scope);
      return l.truthy() ? l : eval(*e.right, scope);
    }
    const Value l = eval(*e.left, scope);
    const Value r = eval(*e.right, scope);
    if (op == "~") {
      Str s = l.is_undefined() ? Str() : to_str(l);
      if (!r.is_undefined()) s.append(to_str(r));
      return Value(std::move(s));
    }
    if (op == "==") return Value(equals(l, r));
    if (op == "!=") return Value(!equals(l, r));
    if (op == "in" || op == "not in") {
      CallArgs a;
      a.positional.push_back(r);
      if (!r.is_string() && !r.is_list() && !r.is_dict() && !r.is_undefined())
        fail(str_cat("argument of type '", r.type_name(), "' is not iterable"));
      const bool in = apply_test("in", l, a);
      return Value(op == "in" ? in : !in);
    }
    if (l.is_undefined()) fail_undefined(l);
    if (r.is_undefined()) fail_undefined(r);
    if (op == "<") return Value(less_than(l, r));
    if (op == ">") return Value(less_than(r, l));
    if (op == "<=") return Value(!less_than(r, l));
    if (op == ">=") return Value(!less_than(l, r));
    return arithmetic(op, l, r);
  }

  Value repeat(const Value& seq, int64_t times) {
    const size_t size = seq.is_string() ? seq.as_str().size() : seq.as_list().size();
    const size_t most = seq.is_string() ? kMaxStrBytes : kMaxListItems;
    if (times > 0 && size > 0 && static_cast<uint64_t>(times) > most / size)
      fail(str_cat("the template repeated a ", seq.type_name(), " of ", size, " to over ", most,
                   seq.is_string() ? " bytes" : " items"));
    charge(times <= 0 ? 0 : static_cast<uint64_t>(times) * size / (seq.is_string() ? kStrBytesPerStep : 1));
    if (seq.is_string()) {
      Str out;
      for (int64_t i = 0; i < times; ++i) out.append(seq.as_str());
      return Value(std::move(out));
    }
    List out;
    for (int64_t i = 0; i < times; ++i) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
    return Value(std::move(out));
  }

  Value arithmetic(const std::string& op, const Value& l, const Value& r) {
    auto unsupported = [&]() -> Value {
      fail(str_cat("unsupported operand type(s) for ", op, ": '", l.type_name(), "' and '", r.type_name(), "'"));
    };
    if (op == "+") {
      if (l.is_string() && r.is_string()) {
        charge((l.as_str().size() + r.as_str().size()) / kStrBytesPerStep);
        Str s = l.as_str();
        s.append(r.as_str());
        return Value(std::move(s));
      }
      if (l.is_list() && r.is_list()) {
        charge(l.as_list().size() + r.as_list().size());
        List out = l.as_list();
        out.insert(out.end(), r.as_list().begin(), r.as_list().end());
        return Value(std::move(out));
      }
      // Python's own words, which templates' users will search for.
      if (l.is_string() || l.is_list())
        fail(str_cat("can only concatenate ", l.type_name(), " (not \"", r.type_name(), "\") to ", l.type_name()));
    }
    if (op == "*") {
      if ((l.is_string() || l.is_list()) && (r.is_int() || r.is_bool())) return repeat(l, r.as_int());
      if ((r.is_string() || r.is_list()) && (l.is_int() || l.is_bool())) return repeat(r, l.as_int());
    }
    if (!l.is_number() || !r.is_number()) return unsupported();
    const bool floating = l.is_float() || r.is_float();
    if (op == "/") {
      if (r.as_double() == 0) fail("division by zero");
      return Value(l.as_double() / r.as_double());
    }
    if (op == "**") {
      if (!floating && r.as_int() >= 0) {
        int64_t result = 1;
        for (int64_t i = 0; i < r.as_int(); ++i) result *= l.as_int();
        return Value(result);
      }
      return Value(std::pow(l.as_double(), r.as_double()));
    }
    if (floating) {
      const double a = l.as_double(), b = r.as_double();
      if (op == "+") return Value(a + b);
      if (op == "-") return Value(a - b);
      if (op == "*") return Value(a * b);
      if (b == 0) fail("float division by zero");
      if (op == "//") return Value(std::floor(a / b));
      if (op == "%") {
        double m = std::fmod(a, b);
        if (m != 0 && ((m < 0) != (b < 0))) m += b;
        return Value(m);
      }
      return unsupported();
    }
    const int64_t a = l.as_int(), b = r.as_int();
    if (op == "+") return Value(a + b);
    if (op == "-") return Value(a - b);
    if (op == "*") return Value(a * b);
    if (b == 0) fail("integer division or modulo by zero");
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) --q;  // Python floors
    if (op == "//") return Value(q);
    if (op == "%") return Value(a - q * b);
    return unsupported();
  }

  const Dict& variables_;
  std::string_view name_;
  Scope root_;
  int depth_ = 0;
  std::vector<std::shared_ptr<Dict>> assigned_namespaces_;
  uint64_t steps_ = 0;
};

}  // namespace

Template Template::parse(std::string_view source, std::string name) {
  Template t;
  t.name_ = std::move(name);
  t.body_ = std::make_shared<const Body>(parse_tokens(tokenize(source, t.name_), t.name_));
  return t;
}

Str Template::render(const Dict& variables) const {
  Interpreter interpreter(variables, name_);
  return interpreter.render(*body_);
}

}  // namespace ridge::jinja
