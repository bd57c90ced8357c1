#include "tokenizer/jinja/parser.h"

#include <charconv>
#include <initializer_list>

#include "tokenizer/jinja/builtins.h"
#include "tokenizer/jinja/template.h"

namespace ridge::jinja {
namespace {

// Deeper nesting than any template needs; a guard so a crafted one cannot exhaust the stack.
constexpr int kMaxNesting = 200;

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, std::string_view name) : t_(tokens), name_(name) {}

  Body parse_all() {
    Body body = parse_body({});
    if (peek().kind != TokenKind::kEnd) error(peek(), str_cat("unexpected '", peek().text, "'"));
    if (!unknown_.empty()) error(*unknown_.front().first, unknown_.front().second);
    return body;
  }

 private:
  // --- tokens ---
  const Token& peek(size_t ahead = 0) const {
    return t_[std::min(i_ + ahead, t_.size() - 1)];
  }
  const Token& next() {
    const Token& t = t_[i_];
    if (i_ + 1 < t_.size()) ++i_;
    return t;
  }
  bool is_op(std::string_view op, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kOperator && peek(ahead).text == op;
  }
  bool is_name(std::string_view name, size_t ahead = 0) const {
    return peek(ahead).kind == TokenKind::kName && peek(ahead).text == name;
  }
  bool accept_op(std::string_view op) {
    if (!is_op(op)) return false;
    next();
    return true;
  }
  bool accept_name(std::string_view name) {
    if (!is_name(name)) return false;
    next();
    return true;
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case TokenKind::kEnd: return "end of template";
      case TokenKind::kVarEnd: return "'}}'";
      case TokenKind::kBlockEnd: return "'%}'";
      case TokenKind::kString: return "a string";
      case TokenKind::kText: return "template text";
      default: return str_cat("'", t.text, "'");
    }
  }
  [[noreturn]] void error(const Token& at, std::string_view what) const {
    throw TemplateError(TemplateError::Kind::kSyntax, name_, at.where, what);
  }
  void expect_op(std::string_view op) {
    if (!accept_op(op)) error(peek(), str_cat("expected '", op, "', got ", describe(peek())));
  }
  std::string expect_identifier() {
    if (peek().kind != TokenKind::kName) error(peek(), str_cat("expected a name, got ", describe(peek())));
    return next().text;
  }
  void expect_block_end() {
    if (peek().kind != TokenKind::kBlockEnd) error(peek(), str_cat("expected '%}', got ", describe(peek())));
    next();
  }

  // --- statements ---

  // Parses until a {% tag %} whose name is in `ends` (left unread after the '{%'), or the
  // end of the template when `ends` is empty.
  Body parse_body(std::initializer_list<std::string_view> ends, const Token* opener = nullptr) {
    Nest nest(*this);
    Body body;
    while (true) {
      const Token& t = peek();
      if (t.kind == TokenKind::kEnd) {
        if (ends.size() == 0) return body;
        error(opener ? *opener : t, str_cat("unexpected end of template: this '", opener ? opener->text : "",
                                            "' needs '{% ", *std::prev(ends.end()), " %}'"));
      }
      if (t.kind == TokenKind::kText) {
        auto n = make_node(NodeKind::kText, t);
        n->text = next().text;
        body.push_back(std::move(n));
      } else if (t.kind == TokenKind::kVarBegin) {
        auto n = make_node(NodeKind::kOutput, next());
        n->expr = parse_tuple(true);
        if (peek().kind != TokenKind::kVarEnd) error(peek(), str_cat("expected '}}', got ", describe(peek())));
        next();
        body.push_back(std::move(n));
      } else if (t.kind == TokenKind::kBlockBegin) {
        const Token& keyword = peek(1);
        if (keyword.kind != TokenKind::kName) error(keyword, str_cat("expected a statement name, got ", describe(keyword)));
        for (std::string_view end : ends)
          if (keyword.text == end) {
            next();  // '{%': the caller reads the tag name
            return body;
          }
        next();
        body.push_back(parse_statement());
      } else {
        error(t, str_cat("unexpected ", describe(t)));
      }
    }
  }

  std::unique_ptr<Node> make_node(NodeKind kind, const Token& at) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->where = at.where;
    return n;
  }

  // After "{% endX": the rest of the closing tag.
  void finish_end_tag() { expect_block_end(); }

  std::unique_ptr<Node> parse_statement() {
    const Token& keyword = next();
    const std::string& k = keyword.text;
    if (k == "if") return parse_if(keyword);
    if (k == "for") return parse_for(keyword);
    if (k == "set") return parse_set(keyword);
    if (k == "macro") return parse_macro(keyword);
    if (k == "call") return parse_call_block(keyword);
    if (k == "filter") return parse_filter_block(keyword);
    if (k == "generation") {
      auto n = make_node(NodeKind::kScope, keyword);
      expect_block_end();
      n->body = parse_body({"endgeneration"}, &keyword);
      next();
      finish_end_tag();
      return n;
    }
    if (k == "break" || k == "continue") {
      auto n = make_node(k == "break" ? NodeKind::kBreak : NodeKind::kContinue, keyword);
      expect_block_end();
      return n;
    }
    if (k == "include" || k == "import" || k == "from" || k == "extends" || k == "block")
      error(keyword, str_cat("'", k, "' is not supported in chat templates (a template is one self-contained string)"));
    error(keyword, str_cat("unknown statement '", k, "'"));
  }

  std::unique_ptr<Node> parse_if(const Token& keyword) {
    Soft soft(*this);
    auto n = make_node(NodeKind::kIf, keyword);
    while (true) {
      IfBranch branch;
      branch.condition = parse_tuple(false);
      expect_block_end();
      branch.body = parse_body({"elif", "else", "endif"}, &keyword);
      n->branches.push_back(std::move(branch));
      const std::string tag = next().text;
      if (tag == "elif") continue;
      if (tag == "else") {
        expect_block_end();
        n->else_body = parse_body({"endif"}, &keyword);
        next();
      }
      finish_end_tag();
      return n;
    }
  }

  std::vector<std::string> parse_targets() {
    std::vector<std::string> names;
    const bool paren = accept_op("(");
    names.push_back(expect_identifier());
    while (accept_op(",")) {
      if (peek().kind != TokenKind::kName || is_name("in")) break;
      names.push_back(expect_identifier());
    }
    if (paren) expect_op(")");
    return names;
  }

  std::unique_ptr<Node> parse_for(const Token& keyword) {
    auto n = make_node(NodeKind::kFor, keyword);
    n->targets = parse_targets();
    if (!accept_name("in")) error(peek(), str_cat("expected 'in', got ", describe(peek())));
    n->expr = parse_tuple(false, /*stop_at_if=*/true);
    if (accept_name("if")) n->condition = parse_tuple(false);
    if (is_name("recursive")) error(peek(), "recursive loops are not supported");
    expect_block_end();
    n->body = parse_body({"endfor", "else"}, &keyword);
    if (next().text == "else") {
      expect_block_end();
      n->else_body = parse_body({"endfor"}, &keyword);
      next();
    }
    finish_end_tag();
    return n;
  }

  std::unique_ptr<Node> parse_set(const Token& keyword) {
    auto n = make_node(NodeKind::kSet, keyword);
    std::string first = expect_identifier();
    if (accept_op(".")) {
      n->targets = {first};
      n->attribute = expect_identifier();
    } else {
      n->targets = {first};
      while (accept_op(",")) n->targets.push_back(expect_identifier());
    }
    if (accept_op("=")) {
      n->expr = parse_tuple(true);
      expect_block_end();
      return n;
    }
    if (!n->attribute.empty() || n->targets.size() != 1) error(peek(), "expected '=' after the set target");
    n->kind = NodeKind::kSetBlock;
    if (is_op("|")) n->expr = parse_filter_chain(make_name("", keyword));
    expect_block_end();
    n->body = parse_body({"endset"}, &keyword);
    next();
    finish_end_tag();
    return n;
  }

  std::vector<Param> parse_params() {
    std::vector<Param> params;
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      Param p;
      p.name = expect_identifier();
      if (accept_op("=")) p.default_value = parse_expression();
      params.push_back(std::move(p));
    }
    expect_op(")");
    return params;
  }

  std::unique_ptr<Node> parse_macro(const Token& keyword) {
    auto n = make_node(NodeKind::kMacro, keyword);
    n->text = expect_identifier();
    n->params = parse_params();
    expect_block_end();
    n->body = parse_body({"endmacro"}, &keyword);
    next();
    if (peek().kind == TokenKind::kName) next();  // {% endmacro name %}
    finish_end_tag();
    return n;
  }

  std::unique_ptr<Node> parse_call_block(const Token& keyword) {
    auto n = make_node(NodeKind::kCallBlock, keyword);
    if (is_op("(")) n->params = parse_params();
    n->expr = parse_expression();
    if (n->expr->kind != ExprKind::kCall) error(keyword, "{% call %} needs a macro call");
    expect_block_end();
    n->body = parse_body({"endcall"}, &keyword);
    next();
    finish_end_tag();
    return n;
  }

  std::unique_ptr<Node> parse_filter_block(const Token& keyword) {
    auto n = make_node(NodeKind::kFilterBlock, keyword);
    // The chain applies to the body's text, read through the name "" at render time.
    ExprPtr e = make_name("", keyword);
    do {
      e = parse_filter(std::move(e));
    } while (accept_op("|"));
    n->expr = std::move(e);
    expect_block_end();
    n->body = parse_body({"endfilter"}, &keyword);
    next();
    finish_end_tag();
    return n;
  }

  // --- expressions ---

  ExprPtr make_expr(ExprKind kind, Location where) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->where = where;
    return e;
  }
  ExprPtr make_name(std::string name, const Token& at) {
    auto e = make_expr(ExprKind::kName, at.where);
    e->name = std::move(name);
    return e;
  }

  // a, b, c as a tuple, or one expression.
  ExprPtr parse_tuple(bool with_condition, bool stop_at_if = false) {
    const Location where = peek().where;
    ExprPtr first = with_condition && !stop_at_if ? parse_expression() : parse_or();
    if (!is_op(",")) return first;
    auto tuple = make_expr(ExprKind::kTuple, where);
    tuple->items.push_back(std::move(first));
    while (accept_op(",")) {
      if (peek().kind == TokenKind::kVarEnd || peek().kind == TokenKind::kBlockEnd || is_op(")") || is_name("if")) break;
      tuple->items.push_back(with_condition && !stop_at_if ? parse_expression() : parse_or());
    }
    return tuple;
  }

  ExprPtr parse_expression() {
    Nest nest(*this);
    const size_t unknown_before = unknown_.size();
    ExprPtr e = parse_or();
    while (is_name("if")) {
      unknown_.resize(std::min(unknown_.size(), unknown_before));  // `then if c else e` is conditional
      Soft soft(*this);
      const Location where = next().where;
      auto c = make_expr(ExprKind::kCondition, where);
      c->condition = parse_or();
      c->then_expr = std::move(e);
      if (accept_name("else")) c->else_expr = parse_expression();
      e = std::move(c);
    }
    return e;
  }

  ExprPtr binary(std::string op, ExprPtr left, ExprPtr right, Location where) {
    auto e = make_expr(ExprKind::kBinary, where);
    e->name = std::move(op);
    e->left = std::move(left);
    e->right = std::move(right);
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr e = parse_and();
    while (is_name("or")) {
      const Location where = next().where;
      e = binary("or", std::move(e), parse_and(), where);
    }
    return e;
  }

  ExprPtr parse_and() {
    ExprPtr e = parse_not();
    while (is_name("and")) {
      const Location where = next().where;
      e = binary("and", std::move(e), parse_not(), where);
    }
    return e;
  }

  ExprPtr parse_not() {
    Nest nest(*this);
    if (is_name("not")) {
      auto e = make_expr(ExprKind::kUnary, next().where);
      e->name = "not";
      e->object = parse_not();
      return e;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr e = parse_math1();
    while (true) {
      const Token& t = peek();
      std::string op;
      if (t.kind == TokenKind::kOperator &&
          (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == ">" || t.text == "<=" || t.text == ">=")) {
        op = t.text;
        next();
      } else if (is_name("in")) {
        op = "in";
        next();
      } else if (is_name("not") && is_name("in", 1)) {
        op = "not in";
        next();
        next();
      } else {
        return e;
      }
      // a < b < c is (a < b) and (b < c) in Python; chat templates do not chain, so
      // refuse it rather than evaluate it another way.
      ExprPtr right = parse_math1();
      e = binary(op, std::move(e), std::move(right), t.where);
      if (t.kind == TokenKind::kOperator && peek().kind == TokenKind::kOperator &&
          (peek().text == "<" || peek().text == ">" || peek().text == "<=" || peek().text == ">=" ||
           peek().text == "==" || peek().text == "!="))
        error(peek(), "chained comparisons (a < b < c) are not supported");
    }
  }

  ExprPtr parse_math1() {
    ExprPtr e = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& t = next();
      e = binary(t.text, std::move(e), parse_concat(), t.where);
    }
    return e;
  }

  ExprPtr parse_concat() {
    ExprPtr e = parse_math2();
    while (is_op("~")) {
      const Token& t = next();
      e = binary("~", std::move(e), parse_math2(), t.where);
    }
    return e;
  }

  ExprPtr parse_math2() {
    ExprPtr e = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& t = next();
      e = binary(t.text, std::move(e), parse_pow(), t.where);
    }
    return e;
  }

  ExprPtr parse_pow() {
    ExprPtr e = parse_unary(true);
    while (is_op("**")) {
      const Token& t = next();
      e = binary("**", std::move(e), parse_unary(true), t.where);
    }
    return e;
  }

  ExprPtr parse_unary(bool with_filter) {
    Nest nest(*this);
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token& t = next();
      e = make_expr(ExprKind::kUnary, t.where);
      e->name = t.text;
      e->object = parse_unary(false);
    } else {
      e = parse_primary();
    }
    e = parse_postfix(std::move(e));
    if (with_filter) e = parse_filter_expr(std::move(e));
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = peek();
    switch (t.kind) {
      case TokenKind::kName: {
        next();
        if (t.text == "true" || t.text == "True") return literal(Value(true), t);
        if (t.text == "false" || t.text == "False") return literal(Value(false), t);
        if (t.text == "none" || t.text == "None") return literal(Value(None{}), t);
        return make_name(t.text, t);
      }
      case TokenKind::kString: {
        std::string text = next().text;
        while (peek().kind == TokenKind::kString) text += next().text;  // 'a' 'b' is 'ab'
        return literal(Value(Str::markup(std::move(text))), t);
      }
      case TokenKind::kInteger: {
        next();
        int64_t v = 0;
        const std::string& s = t.text;
        int base = 10;
        size_t skip = 0;
        if (s.size() > 2 && s[0] == '0' && (s[1] == 'x' || s[1] == 'X')) base = 16, skip = 2;
        auto [p, ec] = std::from_chars(s.data() + skip, s.data() + s.size(), v, base);
        if (ec != std::errc() || p != s.data() + s.size()) error(t, str_cat("integer '", s, "' is out of range"));
        return literal(Value(v), t);
      }
      case TokenKind::kFloat: {
        next();
        double v = 0;
        std::from_chars(t.text.data(), t.text.data() + t.text.size(), v);
        return literal(Value(v), t);
      }
      case TokenKind::kOperator:
        if (t.text == "(") {
          next();
          if (accept_op(")")) return make_expr(ExprKind::kTuple, t.where);
          ExprPtr e = parse_tuple(true);
          expect_op(")");
          return e;
        }
        if (t.text == "[") {
          next();
          auto e = make_expr(ExprKind::kList, t.where);
          while (!is_op("]")) {
            if (!e->items.empty()) expect_op(",");
            if (is_op("]")) break;
            e->items.push_back(parse_expression());
          }
          expect_op("]");
          return e;
        }
        if (t.text == "{") {
          next();
          auto e = make_expr(ExprKind::kDict, t.where);
          while (!is_op("}")) {
            if (!e->items.empty()) expect_op(",");
            if (is_op("}")) break;
            e->items.push_back(parse_expression());
            expect_op(":");
            e->items.push_back(parse_expression());
          }
          expect_op("}");
          return e;
        }
        break;
      default: break;
    }
    error(t, str_cat("unexpected ", describe(t)));
  }

  ExprPtr literal(Value v, const Token& at) {
    auto e = make_expr(ExprKind::kLiteral, at.where);
    e->value = std::move(v);
    return e;
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        const Token& dot = next();
        const Token& t = next();
        if (t.kind == TokenKind::kName) {
          auto a = make_expr(ExprKind::kAttribute, dot.where);
          a->object = std::move(e);
          a->name = t.text;
          e = std::move(a);
        } else if (t.kind == TokenKind::kInteger) {
          auto s = make_expr(ExprKind::kSubscript, dot.where);
          s->object = std::move(e);
          s->left = literal(Value(static_cast<int64_t>(std::stoll(t.text))), t);
          e = std::move(s);
        } else {
          error(t, str_cat("expected an attribute name after '.', got ", describe(t)));
        }
      } else if (is_op("[")) {
        e = parse_subscript(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object) {
    const Token& open = next();
    ExprPtr start;
    if (!is_op(":")) start = parse_expression();
    if (!is_op(":")) {
      expect_op("]");
      auto s = make_expr(ExprKind::kSubscript, open.where);
      s->object = std::move(object);
      s->left = std::move(start);
      return s;
    }
    auto s = make_expr(ExprKind::kSlice, open.where);
    s->object = std::move(object);
    s->start = std::move(start);
    next();  // ':'
    if (!is_op("]") && !is_op(":")) s->stop = parse_expression();
    if (accept_op(":") && !is_op("]")) s->step = parse_expression();
    expect_op("]");
    return s;
  }

  void parse_args(std::vector<Argument>& args) {
    expect_op("(");
    while (!is_op(")")) {
      if (!args.empty()) expect_op(",");
      if (is_op(")")) break;
      Argument a;
      if (peek().kind == TokenKind::kName && is_op("=", 1)) {
        a.name = next().text;
        next();
      } else if (!args.empty() && !args.back().name.empty()) {
        error(peek(), "a positional argument follows a keyword argument");
      }
      a.value = parse_expression();
      args.push_back(std::move(a));
    }
    expect_op(")");
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto c = make_expr(ExprKind::kCall, peek().where);
    c->object = std::move(callee);
    parse_args(c->args);
    return c;
  }

  ExprPtr parse_filter_expr(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        next();
        e = parse_filter(std::move(e));
      } else if (is_name("is")) {
        e = parse_test(std::move(e));
      } else if (is_op("(")) {
        e = parse_call(std::move(e));
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filter_chain(ExprPtr e) {
    while (accept_op("|")) e = parse_filter(std::move(e));
    return e;
  }

  // After '|': name[(args)].
  ExprPtr parse_filter(ExprPtr object) {
    const Token& t = peek();
    auto f = make_expr(ExprKind::kFilter, t.where);
    f->name = expect_identifier();
    while (accept_op(".")) f->name += "." + expect_identifier();
    if (!is_known_filter(f->name)) unknown(t, str_cat("no filter named '", f->name, "'"));
    f->object = std::move(object);
    if (is_op("(")) parse_args(f->args);
    return f;
  }

  ExprPtr parse_test(ExprPtr object) {
    const Token& is = next();
    auto e = make_expr(ExprKind::kTest, is.where);
    e->negated = accept_name("not");
    // "none", "true" and "false" are test names here, not literals.
    const Token& name_token = peek();
    e->name = expect_identifier();
    while (accept_op(".")) e->name += "." + expect_identifier();
    if (!is_known_test(e->name)) unknown(name_token, str_cat("no test named '", e->name, "'"));
    e->object = std::move(object);
    const Token& t = peek();
    if (is_op("(")) {
      parse_args(e->args);
    } else if ((t.kind == TokenKind::kName || t.kind == TokenKind::kString || t.kind == TokenKind::kInteger ||
                t.kind == TokenKind::kFloat || is_op("[") || is_op("{")) &&
               !is_name("else") && !is_name("or") && !is_name("and")) {
      if (is_name("is")) error(t, "tests cannot be chained with 'is'");
      Argument a;
      a.value = parse_postfix(parse_primary());
      e->args.push_back(std::move(a));
    }
    return e;
  }

  // An unknown filter or test is a syntax error, as jinja2 compiles it, except where jinja2
  // leaves it to run time: inside an {% if %} (its tests and branches) or an inline
  // `a if c else b`. A template can then name a filter only a branch it never takes uses;
  // taking it fails the render. Errors outside those wait in unknown_ until the parse ends
  // (an expression turns out to be conditional only at its `if`).
  void unknown(const Token& t, std::string message) {
    if (soft_ == 0) unknown_.emplace_back(&t, std::move(message));
  }
  struct Soft {
    explicit Soft(Parser& p) : p_(p) { ++p_.soft_; }
    ~Soft() { --p_.soft_; }
    Parser& p_;
  };

  // Counts nesting while a parse function runs (an exception ends the parse anyway).
  struct Nest {
    Nest(Parser& p) : p_(p) {
      if (++p_.nesting_ > kMaxNesting) p_.error(p_.peek(), str_cat("nested more than ", kMaxNesting, " deep"));
    }
    ~Nest() { --p_.nesting_; }
    Parser& p_;
  };

  const std::vector<Token>& t_;
  std::string_view name_;
  size_t i_ = 0;
  int nesting_ = 0;
  int soft_ = 0;
  std::vector<std::pair<const Token*, std::string>> unknown_;
};

}  // namespace

Body parse_tokens(const std::vector<Token>& tokens, std::string_view template_name) {
  return Parser(tokens, template_name).parse_all();
}

}  // namespace ridge::jinja
