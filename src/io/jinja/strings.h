// Python str operations on UTF-8 text (code-point aware where Python is): strip, split,
// splitlines, replace, count, case changes. Case mapping covers ASCII, Latin-1, Latin Extended-A,
// Greek and Cyrillic simple pairs (a documented difference: Python maps every script, and 'ß'
// upper-cases to 'SS'); title/capitalize remain ASCII-only.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace weft::jinja {

struct RenderContext;

bool py_isspace(uint32_t cp);
// chars == nullptr: Python's whitespace.
std::string py_strip(const std::string& s, const std::string* chars, bool left, bool right);
std::vector<std::string> py_split(const std::string& s, const std::string* sep, int64_t maxsplit, bool from_right);
std::vector<std::string> py_splitlines(const std::string& s);
std::string py_replace(const std::string& s, const std::string& old, const std::string& with, int64_t count,
                       const RenderContext& ctx);
int64_t py_count(const std::string& s, const std::string& sub);
std::string ascii_upper(std::string s);  // str.upper() within the mapped scripts
std::string ascii_lower(std::string s);  // str.lower() within the mapped scripts
std::string py_title(const std::string& s);       // str.title()
std::string py_capitalize(const std::string& s);  // str.capitalize()
std::string jinja_title(const std::string& s);    // the |title filter (words split at -, space, ( { [ <)
bool py_is(const std::string& s, const std::string& which);  // isdigit, isalpha, isalnum, isspace, isupper, islower

}  // namespace weft::jinja
