// The syntax tree of a parsed template: expressions and statements, each with the line
// and column it starts at, for error messages. Built by parser.cpp, walked by
// interpreter.cpp.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/jinja/value.h"

namespace ridge::jinja {

struct Location {
  int line = 1;
  int column = 1;
};

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Argument {
  std::string name;  // empty for a positional argument
  ExprPtr value;
};

enum class ExprKind {
  kLiteral,    // value
  kName,       // name
  kList,       // items
  kTuple,      // items (evaluates to a list)
  kDict,       // items as key, value pairs
  kAttribute,  // object.name
  kSubscript,  // object[index]
  kSlice,      // object[start:stop:step]; null parts are absent
  kCall,       // callee(args)
  kFilter,     // object | name(args)
  kTest,       // object is [not] name(args)
  kUnary,      // op operand: "not", "-", "+"
  kBinary,     // left op right: + - * / // % ** ~ and or in "not in" == != < > <= >=
  kCondition,  // then_expr if condition else else_expr (else_expr may be null)
};

struct Expr {
  ExprKind kind;
  Location where;
  Value value;                 // kLiteral
  std::string name;            // kName, kAttribute, kFilter, kTest; op for kUnary/kBinary
  bool negated = false;        // kTest: "is not"
  ExprPtr object;              // kAttribute, kSubscript, kSlice, kCall (callee), kFilter, kTest, kUnary
  ExprPtr left, right;         // kBinary; kSubscript uses left as the index
  ExprPtr start, stop, step;   // kSlice
  ExprPtr condition, then_expr, else_expr;  // kCondition
  std::vector<ExprPtr> items;  // kList, kTuple, kDict (key, value, key, value, ...)
  std::vector<Argument> args;  // kCall, kFilter, kTest
};

struct Node;
using Body = std::vector<std::unique_ptr<Node>>;

enum class NodeKind {
  kText,      // text (template data: markup)
  kOutput,    // {{ expr }}
  kIf,        // branches: (condition, body)...; else_body
  kFor,       // for targets in expr [if condition]: body [else else_body]
  kSet,       // set targets = expr, or set object.attribute = expr
  kSetBlock,  // set name [| filters] %}body{% endset
  kMacro,     // macro name(params): body
  kCallBlock, // call[(params)] expr %}body{% endcall
  kFilterBlock,  // filter f %}body{% endfilter (expr: the filter chain over a kName "")
  kBreak,
  kContinue,
  kScope,     // body rendered as it is ({% generation %} blocks)
};

struct Param {
  std::string name;
  ExprPtr default_value;  // null: required
};

struct IfBranch {
  ExprPtr condition;
  Body body;
};

struct Node {
  NodeKind kind;
  Location where;
  std::string text;                  // kText; kMacro: name
  ExprPtr expr;                      // kOutput, kFor (iterable), kSet (value), kCallBlock (call), kFilterBlock
  ExprPtr condition;                 // kFor: the loop filter
  std::vector<std::string> targets;  // kFor, kSet, kSetBlock: names (several for unpacking)
  std::string attribute;             // kSet into a namespace: targets[0].attribute
  std::vector<IfBranch> branches;    // kIf
  Body body, else_body;
  std::vector<Param> params;         // kMacro, kCallBlock
};

}  // namespace ridge::jinja
