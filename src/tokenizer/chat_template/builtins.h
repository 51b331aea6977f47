// The builtin library of the template language: filters, tests, attribute/item access and
// the methods of str/dict/list, global functions, and Python operators. Everything here works
// on immutable values; the sandbox rules live in get_attr (no underscore attributes).
#pragma once

#include <string>

#include "tokenizer/chat_template/interpreter.h"
#include "tokenizer/chat_template/value.h"

namespace lancet::jinja {

bool has_filter(const std::string& name);
bool has_test(const std::string& name);
Value apply_filter(Interpreter& in, const std::string& name, const Value& subject, const CallArgs& args);
bool apply_test(Interpreter& in, const std::string& name, const Value& subject, const CallArgs& args);

// obj.name and obj[key] with Jinja's fallbacks; missing -> undefined. Underscore-prefixed
// attributes raise "access to attribute ... is not allowed".
Value get_attr(const Value& obj, const std::string& name);
Value get_item(const Value& obj, const Value& key);
Value slice(Interpreter& in, const Value& obj, const Value& start, const Value& stop, const Value& step);

// range, namespace, raise_exception, strftime_now, dict.
DictData make_globals();

// Python operators (+ - * / // % ** ~) and `in`.
Value binary_op(Interpreter& in, const std::string& op, const Value& a, const Value& b);
bool contains(const Value& container, const Value& item);

// Iterating a value as a for loop or the list filter would: list items, dict keys, string
// characters; undefined iterates as empty.
std::vector<Value> iterate(const Value& v);

}  // namespace lancet::jinja
