// One definition rule across src/: no class, struct, union or enum may be defined twice under
// the same name in the same named namespace. Two such definitions with different layouts link
// without a diagnostic (their inline members are weak symbols, the linker keeps one) and then
// corrupt memory: weft::lab::ArmResult was once defined by both lab/bench.h and lab/fidelity.h,
// and a Debug -O0 `weft` crashed in bench and fidelity. Anonymous namespaces, function bodies
// and class bodies are skipped: names there have internal or nested scope.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

namespace {

// Comments, string and character literals and preprocessor lines removed (string contents are
// replaced by nothing, so braces inside them do not count).
std::string strip(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 2, "//") == 0) {
      while (i < s.size() && s[i] != '\n') ++i;
    } else if (s.compare(i, 2, "/*") == 0) {
      size_t e = s.find("*/", i + 2);
      i = e == std::string::npos ? s.size() : e + 2;
    } else if (s[i] == '"' || s[i] == '\'') {
      const char q = s[i++];
      while (i < s.size() && s[i] != q) i += s[i] == '\\' ? 2 : 1;
      ++i;
      out += ' ';
    } else if (s[i] == '#' && (i == 0 || out.empty() || out.back() == '\n')) {
      while (i < s.size() && s[i] != '\n') i += s[i] == '\\' ? 2 : 1;  // continued lines too
    } else {
      out += s[i++];
    }
  }
  return out;
}

// Identifiers, "::" and single punctuation characters.
std::vector<std::string> tokenize(const std::string& s) {
  std::vector<std::string> t;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (std::isspace(c)) { ++i; continue; }
    if (std::isalnum(c) || c == '_') {
      size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      t.push_back(s.substr(i, j - i));
      i = j;
    } else if (s.compare(i, 2, "::") == 0) {
      t.push_back("::");
      i += 2;
    } else {
      t.push_back(std::string(1, s[i++]));
    }
  }
  return t;
}

// "ns::Name" of every type defined at the scope of a named namespace.
std::vector<std::string> namespace_scope_types(const std::string& source) {
  const std::vector<std::string> t = tokenize(strip(source));
  struct Scope { bool named_namespace; std::string name; };
  std::vector<Scope> stack;
  std::vector<std::string> found;
  auto at_namespace_scope = [&] {
    for (const Scope& s : stack) if (!s.named_namespace) return false;
    return true;
  };
  auto qualified = [&](const std::string& name) {
    std::string q;
    for (const Scope& s : stack) q += s.name + "::";
    return q + name;
  };
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] == "namespace") {
      std::string name;
      size_t j = i + 1;
      while (j < t.size() && (t[j] == "::" || std::isalpha(static_cast<unsigned char>(t[j][0])) || t[j][0] == '_'))
        name += t[j++];
      if (j < t.size() && t[j] == "{") {
        stack.push_back({!name.empty(), name});
        i = j;
      }
      continue;
    }
    const bool type_key = t[i] == "struct" || t[i] == "class" || t[i] == "union" || t[i] == "enum";
    if (type_key) {
      size_t j = i + 1;
      if (t[i] == "enum" && j < t.size() && (t[j] == "class" || t[j] == "struct")) ++j;
      if (j < t.size() && t[j] == "alignas") {  // alignas(N)
        int depth = 0;
        for (++j; j < t.size(); ++j) {
          if (t[j] == "(") ++depth;
          if (t[j] == ")" && --depth == 0) { ++j; break; }
        }
      }
      std::string name;
      while (j < t.size() && (t[j] == "::" || std::isalpha(static_cast<unsigned char>(t[j][0])) || t[j][0] == '_')) {
        if (t[j] == "final") break;
        name += t[j++];
      }
      if (j < t.size() && t[j] == "final") ++j;
      if (j < t.size() && t[j] == ":")  // base clause / enum base
        while (j < t.size() && t[j] != "{" && t[j] != ";") ++j;
      if (!name.empty() && j < t.size() && t[j] == "{") {
        if (at_namespace_scope() && !stack.empty()) found.push_back(qualified(name));
        stack.push_back({false, name});
        i = j;
      } else if (t[i] == "enum" && j > i + 1) {
        i = j - 1;  // skip "class" of "enum class X;" so it is not read as a class
      }
      continue;
    }
    if (t[i] == "{") stack.push_back({false, ""});
    else if (t[i] == "}" && !stack.empty()) stack.pop_back();
  }
  return found;
}

TEST(OneDefinitionRule, ScannerSeesOnlyNamespaceScopeDefinitions) {
  const std::string src = R"(
    #include "x.h"
    namespace a::b {
    struct Fwd;                         // declaration only
    struct Defined { struct Nested { int x; }; };
    class alignas(64) Aligned final : public Base<int> { };
    enum class Kind : int { kA, kB };
    template <class T, typename U> struct Tmpl { };
    inline void f() { struct Local { }; }
    namespace { struct Internal { }; }
    // struct InComment { };
    const char* s = "struct InString { }";
    }  // namespace a::b
    struct Global { };
  )";
  const std::vector<std::string> want = {"a::b::Defined", "a::b::Aligned", "a::b::Kind", "a::b::Tmpl"};
  EXPECT_EQ(namespace_scope_types(src), want);
}

TEST(OneDefinitionRule, NoTypeDefinedTwiceInANamespace) {
  namespace fs = std::filesystem;
  std::map<std::string, std::set<std::string>> where;  // qualified type -> files defining it
  size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(fs::path(WEFT_SOURCE_DIR) / "src")) {
    const std::string ext = e.path().extension().string();
    if (!e.is_regular_file() || (ext != ".h" && ext != ".cpp" && ext != ".cu" && ext != ".cuh")) continue;
    std::ifstream f(e.path());
    std::stringstream ss;
    ss << f.rdbuf();
    ++files;
    for (const std::string& type : namespace_scope_types(ss.str()))
      where[type].insert(fs::relative(e.path(), WEFT_SOURCE_DIR).string());
  }
  ASSERT_GT(files, 20u);
  ASSERT_GT(where.size(), 20u);  // the scanner found the tree's types
  for (const auto& [type, paths] : where) {
    std::string list;
    for (const std::string& p : paths) list += " " + p;
    EXPECT_EQ(paths.size(), 1u) << type << " is defined in" << list
                                << ": give each its own name (one definition rule)";
  }
}

}  // namespace
