// JSON Schema -> GBNF: a grammar whose every complete text is a JSON value that validates
// against the schema (the converse does not hold: where the schema allows a choice the
// grammar may allow only part of it, e.g. no additional properties unless asked for).
//
// Supported:
//   type (one or a list), enum, const (their values less those that type, minLength /
//   maxLength, the numeric bounds or minItems / maxItems beside them exclude; any other
//   keyword beside them is an error), nullable (OpenAPI), anyOf, oneOf (as anyOf: pick
//   branches that exclude each other), allOf (of object schemas: merged; a part's
//   additionalProperties false admits only its own properties), $ref to "#",
//   "#/$defs/..", "#/definitions/.." (JSON pointers; recursion allowed), $defs/definitions;
//   objects: properties (generated in schema order), required (a key not in properties
//   takes additionalProperties' schema; an error if that is false), additionalProperties
//   (absent or false: only the declared properties; true or a schema: also other keys,
//   never equal to a declared one); arrays: items, prefixItems, minItems, maxItems;
//   strings: minLength, maxLength (code points), format date / time / date-time / uuid /
//   email / ipv4 / ipv6 (the full form) / duration / hostname / uri (a subset: http, https
//   or ftp, a host, a path, a query),
//   pattern (an ECMA-262 subset, a search as JSON Schema says: json_pattern.h; a
//   pattern implies a string schema; minLength / maxLength beside it cut it where that is
//   exact (a pattern anchored at both ends with one repetition of a fixed-width part, e.g.
//   ^[a-z]+$), else an error; format beside it is an error; enum / const values are
//   checked against it);
//   integers and numbers: minimum, maximum, exclusiveMinimum, exclusiveMaximum (for
//   numbers any decimal or exponent form: 0.2, 1e-3, -7.5E-1; see the output shape below),
//   multipleOf an integer up to 1000 whose factor prime to 10 is at most 100 (for numbers
//   too: their multiples are then integers; a fractional multipleOf is an error, since
//   validators that divide doubles disagree: 0.07 / 0.01 = 7.000000000000001).
//   {} and true: any JSON value.
// Annotations are accepted and ignored (title, description, default, examples, $schema,
// $id, $comment, deprecated, readOnly, writeOnly, discriminator, strict, ...). Any other
// keyword, format or value the conversion cannot honour is an error naming it and its
// place ("json_schema: /properties/tags: unsupported keyword 'uniqueItems'"), never
// silently dropped.
//
// Output shape: numbers have at most 16 integer and 16 fraction digits and a 2-digit
// exponent; whitespace between tokens is at most one space (compact JSON). A number with
// bounds is written without exponent, exactly those such texts within the bounds (compared
// digit by digit, not as doubles), or, when no such text lies within them (a range narrower
// than 1e-16, or beyond 1e16), as a mantissa times one fixed power of ten ("2.5e-20"). An
// inclusive bound is the shortest decimal of its double (what was written, for bounds of at
// most 15 significant digits); an exclusive bound also excludes the texts within half a
// double's spacing of it, so that a validator reading doubles agrees
// (99.9999999999999999 reads as 100.0, which is not below an exclusiveMaximum of 100).
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace lumen::grammar {

struct JsonSchemaLimits {
  size_t max_schema_bytes = 1 << 20;
  int32_t max_rules = 20000;
  int32_t max_depth = 64;            // nesting of subschemas (recursion through $ref excepted)
  int64_t max_length = 100000;       // maxLength / maxItems beyond this: an error
  int32_t max_enum = 2000;
};

// The schema as JSON text. Errors start with "json_schema: <JSON pointer>: ".
Result<std::string> json_schema_to_gbnf(std::string_view schema_json, const JsonSchemaLimits& limits = {});

// The same schema as rules to embed in a larger grammar: the start rule is `name` (not root),
// every rule the schema needs is named `name`-..., and the shared base rules (ws, json-...)
// keep their names and definitions, so several conversions concatenate into one grammar (a
// rule defined twice keeps its last, here identical, definition). `name`: [a-z0-9-]+, not
// root, ws, json... or s-... (checked).
Result<std::string> json_schema_to_gbnf_rule(std::string_view schema_json, std::string_view name,
                                             const JsonSchemaLimits& limits = {});

// The grammar of any JSON value (response_format {"type": "json_object"} uses an object).
std::string any_json_gbnf(bool object_only);

}  // namespace lumen::grammar
