// The Jinja interpreter construct by construct (expected strings are what Python's jinja2
// renders under HF's settings), provenance through each operation, and errors naming
// the line and column. tests/python/test_chat_templates.py compares whole templates.
#include <gtest/gtest.h>

#include <string>

#include "tokenizer/jinja/template.h"
#include "tokenizer/jinja/value.h"

namespace ridge::jinja {
namespace {

Dict chat_vars(std::string_view messages_json = R"([{"role": "user", "content": "Hi"}])") {
  Dict vars;
  vars.set(Str::markup("messages"), parse_json(messages_json));
  vars.set(Str::markup("add_generation_prompt"), Value(true));
  vars.set(Str::markup("bos_token"), Value(Str::markup("<s>")));
  return vars;
}

Str render_str(std::string_view source, const Dict& vars = chat_vars()) {
  return Template::parse(source, "t").render(vars);
}

std::string render(std::string_view source, const Dict& vars = chat_vars()) { return render_str(source, vars).text(); }

TemplateError error_of(std::string_view source, const Dict& vars = chat_vars()) {
  try {
    render(source, vars);
  } catch (const TemplateError& e) {
    return e;
  }
  ADD_FAILURE() << "no error for: " << source;
  return TemplateError(TemplateError::Kind::kRender, "", {}, "");
}

TEST(Jinja, TextExpressionsAndComments) {
  EXPECT_EQ(render("a{{ 'b' }}{# gone #}c"), "abc");
  EXPECT_EQ(render("{{ messages[0].content }} {{ messages[0]['role'] }}"), "Hi user");
  EXPECT_EQ(render("{{ missing }}|{{ none }}|{{ true }}|{{ False }}"), "|None|True|False");
  EXPECT_EQ(render("one trailing newline goes\n"), "one trailing newline goes");
  EXPECT_EQ(render("a\r\nb\rc"), "a\nb\nc");
}

TEST(Jinja, WhitespaceControlAsHfConfiguresIt) {
  // trim_blocks: the newline after a block tag goes; lstrip_blocks: indentation before it.
  EXPECT_EQ(render("{% if true %}\n  x\n  {% endif %}\ny"), "  x\ny");
  EXPECT_EQ(render("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render("a  {{- 'b' -}}  c"), "abc");
  EXPECT_EQ(render("  {%+ if true %}x{% endif +%}\ny"), "  x\ny");
  EXPECT_EQ(render("  {# c #}\nx"), "x");
  EXPECT_EQ(render("{{ 'x' }}\n"), "x");  // no trim after }}: the newline was the trailing one
  EXPECT_EQ(render("{{ 'x' }}\ny"), "x\ny");
  EXPECT_EQ(render("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
}

TEST(Jinja, Conditionals) {
  EXPECT_EQ(render("{% if 0 %}a{% elif [] %}b{% elif 'x' %}c{% else %}d{% endif %}"), "c");
  EXPECT_EQ(render("{% if not messages %}a{% else %}b{% endif %}"), "b");
  EXPECT_EQ(render("{{ 'y' if add_generation_prompt else 'n' }}{{ 'z' if false }}"), "y");
  EXPECT_EQ(render("{{ 1 and 'x' }} {{ 0 or 'd' }} {{ none or 0 }}"), "x d 0");
}

TEST(Jinja, ForLoops) {
  EXPECT_EQ(render("{% for x in [1, 2, 3] %}{{ loop.index0 }}{{ loop.index }}{{ loop.first }}{{ loop.last }}"
                   "{{ loop.length }}{{ loop.revindex }},{% endfor %}"),
            "01TrueFalse33,12FalseFalse32,23FalseTrue31,");
  EXPECT_EQ(render("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4] if x is even %}{{ x }}{{ loop.length }}{% endfor %}"), "2242");
  EXPECT_EQ(render("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}{{ v }}{% endfor %}"), "a1b2");
  EXPECT_EQ(render("{% for k in {'b': 1, 'a': 2} %}{{ k }}{% endfor %}"), "ba");
  EXPECT_EQ(render("{% for c in 'hé' %}[{{ c }}]{% endfor %}"), "[h][é]");
  EXPECT_EQ(render("{% for x in [1, 2, 3, 4] %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}"
                   "{% endif %}{{ x }}{% endfor %}"),
            "13");
  EXPECT_EQ(render("{% for x in [1, 2] %}{{ loop.previtem is defined }}{{ loop.nextitem }}{% endfor %}"), "False2True");
}

TEST(Jinja, SetScopesAndNamespaces) {
  // A set inside a loop lives for that iteration only, as in Jinja2; a namespace carries out.
  EXPECT_EQ(render("{% set x = 0 %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}"), "01020");
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in [1, 2, 3] %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"),
            "6");
  EXPECT_EQ(render("{% set a, b = [1, 2] %}{{ b }}{{ a }}"), "21");
  EXPECT_EQ(render("{% set block %}x{{ 1 + 1 }}{% endset %}{{ block }}"), "x2");
  EXPECT_EQ(render("{% set block | upper %}shout{% endset %}{{ block }}"), "SHOUT");
  EXPECT_EQ(render("{% if true %}{% set inner = 'kept' %}{% endif %}{{ inner }}"), "kept");
  // A namespace holding itself (a reference cycle, broken when the render ends).
  EXPECT_EQ(render("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns.me.me is defined }}"), "True");
}

TEST(Jinja, Macros) {
  EXPECT_EQ(render("{% macro f(a, b='d') %}[{{ a }}{{ b }}]{% endmacro %}{{ f(1) }}{{ f(1, 2) }}{{ f(b=3, a=4) }}"),
            "[1d][12][43]");
  EXPECT_EQ(render("{% macro f() %}{{ varargs | length }}{{ kwargs.k }}{% endmacro %}{{ f(1, 2, k='v') }}"), "2v");
  EXPECT_EQ(render("{% macro wrap() %}<{{ caller() }}>{% endmacro %}{% call wrap() %}in{% endcall %}"), "<in>");
  EXPECT_EQ(render("{% filter upper %}a{{ 'b' }}{% endfilter %}"), "AB");
}

TEST(Jinja, Tests) {
  EXPECT_EQ(render("{{ x is defined }}{{ x is undefined }}{{ none is none }}{{ 'a' is string }}{{ {} is mapping }}"),
            "FalseTrueTrueTrueTrue");
  EXPECT_EQ(render("{{ [] is iterable }}{{ 'a' is sequence }}{{ 1 is sequence }}{{ 1.5 is number }}{{ true is boolean }}"),
            "TrueTrueFalseTrueTrue");
  EXPECT_EQ(render("{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 3 is odd }}{{ 9 is divisibleby 3 }}"),
            "TrueFalseTrueTrueTrue");
  EXPECT_EQ(render("{{ 'a' in 'cat' }}{{ 2 not in [1] }}{{ 'k' in {'k': 1} }}{{ 1 is not string }}"), "TrueTrueTrueTrue");
  EXPECT_EQ(render("{{ messages[0] is mapping }}{{ messages[0].content is string }}"), "TrueTrue");
}

TEST(Jinja, Operators) {
  EXPECT_EQ(render("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 4 / 2 }} {{ 2 ** 10 }} {{ 1 + 2 * 3 }}"),
            "3 -4 2 3.5 2.0 1024 7");
  EXPECT_EQ(render("{{ 'a' + 'b' }}{{ 'a' ~ 1 ~ none }}{{ [1] + [2] }}{{ 'ab' * 2 }}{{ -(1) }}"), "aba1None[1, 2]abab-1");
  EXPECT_EQ(render("{{ 1 == 1.0 }}{{ 'a' != 'b' }}{{ 2 >= 2 }}{{ 'a' < 'b' }}{{ [1, 2] == [1, 2] }}"), "TrueTrueTrueTrueTrue");
  EXPECT_EQ(render("{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.0 }} {{ 1e-5 }}"), "0.30000000000000004 1e+20 1.0 1e-05");
}

TEST(Jinja, LiteralsSubscriptsAndSlices) {
  EXPECT_EQ(render(R"({{ 'it\'s' }}{{ "q\"\n\t\x41\u00e9" }}{{ 'a' 'b' }})"), "it'sq\"\n\tAéab");
  EXPECT_EQ(render("{{ [1, 'a', none, true, 1.5] }} {{ {'k': 'v', 'n': [1]} }}"), "[1, 'a', None, True, 1.5] {'k': 'v', 'n': [1]}");
  EXPECT_EQ(render("{{ [1, 2, 3][-1] }}{{ [1, 2, 3][1:] }}{{ [1, 2, 3][::-1] }}{{ 'héllo'[1:3] }}{{ 'abc'[::2] }}"),
            "3[2, 3][3, 2, 1]élac");
  EXPECT_EQ(render("{{ messages[5] is defined }}{{ {'a': 1}['b'] is defined }}{{ none.x }}"), "FalseFalse");
}

TEST(Jinja, StringMethods) {
  EXPECT_EQ(render("{{ '  x  '.strip() }}|{{ '  x '.lstrip() }}|{{ ' x  '.rstrip() }}|{{ 'xxhixx'.strip('x') }}"),
            "x|x | x|hi");
  EXPECT_EQ(render("{{ 'a b  c'.split() }}{{ 'a,b'.split(',') }}{{ 'a,b,c'.split(',', 1) }}"),
            "['a', 'b', 'c']['a', 'b']['a', 'b,c']");
  EXPECT_EQ(render("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}{{ 'aXb'.upper() }}{{ 'aXb'.lower() }}"),
            "TrueTrueAXBaxb");
  EXPECT_EQ(render("{{ 'hello world'.title() }}{{ 'a-a'.replace('a', 'b') }}{{ 'abc'.find('c') }}"), "Hello Worldb-b2");
  EXPECT_EQ(render("{{ {'a': 1}.get('a') }}{{ {'a': 1}.get('b', 2) }}{{ {'a': 1}.keys() | list }}{{ {'a': 1}.values() | list }}"),
            "12['a'][1]");
}

TEST(Jinja, Filters) {
  EXPECT_EQ(render("{{ ' x ' | trim }}{{ 'héllo' | length }}{{ [1, 2] | count }}{{ 'ab' | upper }}{{ 'AB' | lower }}"),
            "x52ABab");
  EXPECT_EQ(render("{{ 'hELLO' | capitalize }}{{ 42 | string }}{{ '7' | int + 1 }}{{ 'x' | int }}{{ 2.9 | int }}"),
            "Hello4280" "2");
  EXPECT_EQ(render("{{ x | default('d') }}{{ '' | default('e', true) }}{{ [1, 2] | first }}{{ 'ab' | last }}"), "de1b");
  EXPECT_EQ(render("{{ [1, 2] | join(', ') }}{{ 'ab' | list }}{{ [1, 2] | reverse | list }}{{ 'ab' | reverse }}"),
            "1, 2['a', 'b'][2, 1]ba");
  EXPECT_EQ(render("{{ ['b', 'A', 'a'] | sort }}{{ ['b', 'A', 'a'] | unique | list }}{{ [3, 1] | sort(reverse=true) }}"),
            "['A', 'a', 'b']['b', 'A'][3, 1]");
  EXPECT_EQ(render("{{ messages | map(attribute='role') | list }}{{ messages | selectattr('role', 'eq', 'user') | list | length }}"
                   "{{ messages | rejectattr('role', 'equalto', 'user') | list }}"),
            "['user']1[]");
  EXPECT_EQ(render("{{ [1, 2, 3, 4] | select('odd') | list }}{{ [1, 2, 3] | reject('odd') | list }}{{ ['a'] | map('upper') | list }}"),
            "[1, 3][2]['A']");
  EXPECT_EQ(render("{{ 'a-a' | replace('a', 'b') }}{{ 'a\nb\n\nc' | indent(2) }}|{{ 'x\ny' | indent(1, true) }}"),
            "b-ba\n  b\n\n  c| x\n y");
  EXPECT_EQ(render("{{ '<a & \"b\">' | e }}{{ '<x>' | safe }}"), "&lt;a &amp; &#34;b&#34;&gt;<x>");
}

TEST(Jinja, ToJsonIsJsonDumpsWithoutHtmlEscaping) {
  // transformers overrides jinja2's tojson (which would write \u003c for <) with
  // json.dumps(ensure_ascii=False): key order kept, ", " and ": " separators.
  EXPECT_EQ(render("{{ {'b': 1, 'a': [1, 2.5, none, true], 'é': \"<q'&>\"} | tojson }}"),
            R"({"b": 1, "a": [1, 2.5, null, true], "é": "<q'&>"})");
  EXPECT_EQ(render("{{ {'a': [1], 'b': {}} | tojson(indent=2) }}"), "{\n  \"a\": [\n    1\n  ],\n  \"b\": {}\n}");
  EXPECT_EQ(render("{{ {'z': 1, 'a': 2} | tojson(sort_keys=true) }}{{ 'tab\t\"' | tojson }}"), R"({"a": 2, "z": 1}"tab\t\"")");
  EXPECT_EQ(render("{{ messages | tojson }}"), R"([{"role": "user", "content": "Hi"}])");
}

TEST(Jinja, Globals) {
  EXPECT_EQ(render("{{ range(3) | list }}{{ range(1, 7, 2) | list }}{{ range(3, 0, -1) | list }}"), "[0, 1, 2][1, 3, 5][3, 2, 1]");
  EXPECT_EQ(render("{{ dict(a=1) }}{{ namespace(a=1).a }}{{ bos_token }}"), "{'a': 1}1<s>");
  EXPECT_EQ(render("{{ strftime_now('%Y') | length }}"), "4");
}

TEST(JinjaProvenance, TemplateTextIsMarkupAndVariablesAreContent) {
  Dict vars = chat_vars(R"([{"role": "user", "content": "<|im_end|>x"}])");
  Str out = render_str("<|im_start|>{{ messages[0].content }}{{ '<|im_end|>' }}", vars);
  EXPECT_EQ(out.text(), "<|im_start|><|im_end|>x<|im_end|>");
  ASSERT_EQ(out.markup_ranges().size(), 2u);
  EXPECT_EQ(out.markup_ranges()[0].begin, 0u);
  EXPECT_EQ(out.markup_ranges()[0].end, 12u);
  EXPECT_EQ(out.markup_ranges()[1].begin, 23u);
  EXPECT_EQ(out.markup_ranges()[1].end, 33u);
}

TEST(JinjaProvenance, ConcatenationSlicingAndMethodsKeepEachBytesOrigin) {
  Dict vars = chat_vars(R"([{"role": "user", "content": "  ab  "}])");
  // '+' keeps both sides' provenance; strip keeps the content's; upper keeps lengths.
  Str out = render_str("{{ '[' + messages[0].content.strip().upper() + ']' }}", vars);
  EXPECT_EQ(out.text(), "[AB]");
  ASSERT_EQ(out.markup_ranges().size(), 2u);
  EXPECT_EQ(out.markup_ranges()[0].end, 1u);
  EXPECT_EQ(out.markup_ranges()[1].begin, 3u);
  // replace: the template's replacement text is markup inside content.
  out = render_str("{{ messages[0].content | replace('a', '<A>') }}", vars);
  EXPECT_EQ(out.text(), "  <A>b  ");
  ASSERT_EQ(out.markup_ranges().size(), 1u);
  EXPECT_EQ(out.markup_ranges()[0].begin, 2u);
  EXPECT_EQ(out.markup_ranges()[0].end, 5u);
  // tojson of anything holding content is content; of the template's own values, markup.
  EXPECT_FALSE(render_str("{{ messages | tojson }}", vars).any_markup());
  EXPECT_TRUE(render_str("{{ {'a': 'b'} | tojson }}", vars).all_markup());
  // A macro's output keeps the provenance of what it wrote.
  out = render_str("{% macro m(x) %}<{{ x }}>{% endmacro %}{{ m(messages[0].content) }}", vars);
  EXPECT_EQ(out.text(), "<  ab  >");
  EXPECT_EQ(out.markup_ranges().size(), 2u);
}

TEST(Jinja, StrFormatFillsFieldsAsPythonDoes) {
  EXPECT_EQ(render("{{ '{} and {}'.format(1, 'x') }}"), "1 and x");
  EXPECT_EQ(render("{{ '{1}{0}{1}'.format('a', 'b') }}"), "bab");
  EXPECT_EQ(render("{{ '{who}: {{literal}}'.format(who='user') }}"), "user: {literal}");
  EXPECT_EQ(render("{{ '[{}]'.format(none) }}"), "[None]");
  // A message's text stays content: its special-token look-alikes are never markup.
  const Dict vars = chat_vars(R"([{"role": "user", "content": "</s>"}])");
  const Str out = render_str("{{ '<s>{}</s>'.format(messages[0].content) }}", vars);
  EXPECT_EQ(out.text(), "<s></s></s>");
  ASSERT_EQ(out.markup_ranges().size(), 2u);
  EXPECT_EQ(out.markup_ranges()[0].end, 3u);    // "<s>"
  EXPECT_EQ(out.markup_ranges()[1].begin, 7u);  // the template's "</s>", not the message's
  EXPECT_EQ(error_of("{{ '{} {}'.format(1) }}").detail(), "Replacement index 1 out of range for positional args tuple");
  EXPECT_EQ(error_of("{{ '{x}'.format(y=1) }}").detail(), "KeyError: 'x'");
  EXPECT_EQ(error_of("{{ '{99999999999999999999}'.format(1) }}").detail(), "Too many decimal digits in format string");
  EXPECT_NE(error_of("{{ '{:>4}'.format(1) }}").detail().find("not supported"), std::string::npos);
  EXPECT_EQ(error_of("{{ 'a}'.format() }}").detail(), "Single '}' encountered in format string");
}

TEST(JinjaErrors, SyntaxErrorsNameLineAndColumn) {
  try {
    Template::parse("line one\n{{ x + }}", "tmpl");
    FAIL() << "no syntax error";
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.kind(), TemplateError::Kind::kSyntax);
    EXPECT_EQ(e.where().line, 2);
    EXPECT_EQ(e.where().column, 8);
    EXPECT_NE(std::string(e.what()).find("tmpl, line 2, column 8: syntax error"), std::string::npos) << e.what();
  }
  for (const char* bad : {"{% if x %}never closed", "{{ 'unterminated }}", "{% for x %}{% endfor %}", "{{ (1 }}",
                          "{# no end", "{% unknown %}", "{% include 'x' %}", "{{ a ] }}",
                          "{{ x | nosuchfilter }}", "{{ x is nosuchtest }}"}) {
    EXPECT_THROW(Template::parse(bad, "t"), TemplateError) << bad;
  }
  // Nesting is bounded, so a crafted template cannot exhaust the stack.
  EXPECT_THROW(Template::parse("{{ " + std::string(5000, '(') + "1" + std::string(5000, ')') + " }}", "t"), TemplateError);
  EXPECT_THROW(Template::parse("{{ " + std::string(3000, '-') + "1 }}", "t"), TemplateError);
}

TEST(JinjaErrors, UnknownFiltersAndTestsInConditionalCodeFailOnlyWhenRun) {
  // As jinja2 3.x: in an {% if %} or an inline if, an unknown filter or test is an error
  // of the render that reaches it, so a template with a branch ridge lacks still works.
  EXPECT_EQ(render("{% if false %}{{ x | nosuchfilter }}{% elif false %}{{ x is nosuchtest }}{% endif %}ok"), "ok");
  EXPECT_EQ(render("{{ (1 | nosuchfilter) if false else 2 }}"), "2");
  EXPECT_EQ(render("{{ 'a' if true else (1 | nosuchfilter) }}"), "a");
  const TemplateError e = error_of("{% if true %}\n  {{ 1 | nosuchfilter }}{% endif %}");
  EXPECT_EQ(e.kind(), TemplateError::Kind::kRender);
  EXPECT_EQ(e.detail(), "no filter named 'nosuchfilter'");
  EXPECT_EQ(e.where().line, 2);
  // Outside conditional code it stays a syntax error, at its place, after other code.
  try {
    Template::parse("{% if c %}{{ 1 | a1 }}{% endif %}\n{{ 1 | nosuchfilter }}", "t");
    ADD_FAILURE() << "no syntax error";
  } catch (const TemplateError& err) {
    EXPECT_EQ(err.kind(), TemplateError::Kind::kSyntax);
    EXPECT_EQ(err.where().line, 2);
    EXPECT_NE(std::string(err.what()).find("no filter named 'nosuchfilter'"), std::string::npos) << err.what();
  }
}

TEST(JinjaErrors, RaiseExceptionAndFailedOperationsAreRenderErrors) {
  TemplateError e = error_of("ok\n  {{ raise_exception('Roles must alternate') }}");
  EXPECT_EQ(e.kind(), TemplateError::Kind::kRaised);
  EXPECT_EQ(e.detail(), "Roles must alternate");
  EXPECT_EQ(e.where().line, 2);
  EXPECT_NE(std::string(e.what()).find("line 2, column"), std::string::npos);

  e = error_of("{{ missing.attr }}");
  EXPECT_EQ(e.kind(), TemplateError::Kind::kRender);
  EXPECT_EQ(e.detail(), "'missing' is undefined");
  EXPECT_EQ(error_of("{{ 'a' + none }}").detail(), "can only concatenate str (not \"NoneType\") to str");
  EXPECT_EQ(error_of("{{ 1 // 0 }}").detail(), "integer division or modulo by zero");
  EXPECT_EQ(error_of("{% set x = 1 %}{% set x.a = 2 %}").detail(), "cannot assign attribute on non-namespace object 'x'");
  EXPECT_NE(error_of("{{ range(1000000) }}").detail().find("Range too big"), std::string::npos);
  EXPECT_NE(error_of("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").detail().find("nested deeper"), std::string::npos);
}

TEST(JinjaJson, ParsesKeepingOrderAndTypes) {
  Value v = parse_json(R"({"z": 1, "a": [1.5, -2, true, null, "\u00e9\n"], "n": 1e3})");
  EXPECT_EQ(to_json(v, {}), R"({"z": 1, "a": [1.5, -2, true, null, "é\n"], "n": 1000.0})");
  EXPECT_THROW(parse_json("{\"a\": }"), Error);
  EXPECT_THROW(parse_json("[1, 2"), Error);
  EXPECT_THROW(parse_json("1 2"), Error);
}

// A template is code from the model file: one that loops for hours or doubles a string
// until the machine runs out of memory must fail its render, not the server.
TEST(Jinja, RendersHaveATimeAndMemoryBudget) {
  const TemplateError loop = error_of("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}x");
  EXPECT_NE(loop.detail().find("more than 2000000 steps"), std::string::npos) << loop.what();
  const TemplateError doubling = error_of(
      "{% set ns = namespace(s='aa') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}{% endfor %}{{ ns.s|length }}");
  EXPECT_NE(doubling.detail().find("string of over 256 MiB"), std::string::npos) << doubling.what();
  EXPECT_EQ(doubling.where().line, 1);
  EXPECT_NE(error_of("{{ ('x' * 1000) * 1000000 }}").detail().find("to over 268435456 bytes"), std::string::npos);
  EXPECT_NE(error_of("{{ ([1, 2] * 100000000)|length }}").detail().find("items"), std::string::npos);
  // Growing a list one item at a time copies it each time: the copies count as work.
  EXPECT_NE(error_of("{% set ns = namespace(l=[]) %}{% for i in range(100000) %}{% set ns.l = ns.l + [i] %}"
                     "{% endfor %}{{ ns.l|length }}")
                .detail()
                .find("steps"),
            std::string::npos);
  // Real work well inside the budget still renders.
  EXPECT_EQ(render("{% set ns = namespace(n=0) %}{% for i in range(1000) %}{% for j in range(100) %}"
                   "{% set ns.n = ns.n + 1 %}{% endfor %}{% endfor %}{{ ns.n }}"),
            "100000");
}

}  // namespace
}  // namespace ridge::jinja
