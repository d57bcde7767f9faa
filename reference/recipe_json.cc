// File: recipe_json.cc — Recipe <-> JSON with strict field checking (recipe_json.h).
#include "reference/recipe_json.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <set>
#include <cstdint>
#include <fstream>
#include <limits>
#include <type_traits>
#include <utility>

#include "reference/error.h"
#include "reference/recipe_fields.h"

namespace dsaf::ref {
namespace {

using nlohmann::json;

// Non-members of the field table that a recipe object may hold.
constexpr const char* kNameKeys[] = {"base", "name", "description", "source", "provenance"};
constexpr const char* kDerivedKey = "cache_bytes_per_token";  // written, read back and ignored

template <class T>
json value_json(const T& value) {
  if constexpr (std::is_enum_v<T>) {
    for (const auto& [v, name] : enum_names(T{})) {
      if (v == value) return name;
    }
    throw Error(ErrorKind::kInternal, "enum value without a name");
  } else {
    return value;
  }
}

// v as a T, or a bad-input error naming `where` (a JSON path). Integers must be JSON
// integers within T's range (nlohmann would cast 1e20 or 64.9 to int: undefined or
// silently truncated); floating fields must stay finite in T (1e39 would become fp32
// +inf, which JSON cannot even write back); enums take one of their names.
template <class T>
void read_value(const json& v, const std::string& where, T& out) {
  const auto wrong = [&](const std::string& what) { throw_bad_input(where + ": " + what + " (" + v.dump() + ")"); };
  if constexpr (std::is_enum_v<T>) {
    std::string allowed;
    for (const auto& [value, name] : enum_names(T{})) {
      if (v.is_string() && v.get<std::string>() == name) {
        out = value;
        return;
      }
      allowed += (allowed.empty() ? "" : ", ") + std::string(name);
    }
    throw_bad_input(where + ": " + v.dump() + " is not one of: " + allowed);
  } else if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    if (!v.is_number_integer()) wrong("wrong type: expected an integer");
    const bool in_range = v.is_number_unsigned()
                              ? v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<T>::max())
                              : v.get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
                                    v.get<int64_t>() <= static_cast<int64_t>(std::numeric_limits<T>::max());
    if (!in_range) wrong("out of range");
    out = v.get<T>();
  } else if constexpr (std::is_floating_point_v<T>) {
    if (!v.is_number()) wrong("wrong type: expected a number");
    const double d = v.get<double>();
    if (!std::isfinite(d) || !std::isfinite(static_cast<T>(d))) wrong("not a finite value of the field's type");
    out = static_cast<T>(d);
  } else {
    try {
      out = v.get<T>();
    } catch (const json::exception&) {
      wrong("wrong type");
    }
  }
}

// The value at a dotted field path of a recipe object, or null when absent; an object on
// the way that is not one is an error naming its path.
const json* find_field(const json& recipe, const std::string& path) {
  const json* node = &recipe;
  std::string where = "recipe";
  size_t begin = 0;
  for (;;) {
    const size_t dot = path.find('.', begin);
    const std::string key = path.substr(begin, dot == std::string::npos ? std::string::npos : dot - begin);
    if (!node->is_object()) throw_bad_input(where + ": expected a JSON object");
    const auto it = node->find(key);
    if (it == node->end()) return nullptr;
    node = &*it;
    where += "." + key;
    if (dot == std::string::npos) return node;
    begin = dot + 1;
  }
}

bool is_field_or_group(const std::string& path, bool& group) {
  bool field = false;
  group = false;
  for_each_field([&](const FieldInfo& f, auto) {
    const std::string p = f.path;
    field = field || p == path;
    group = group || p.compare(0, path.size() + 1, path + ".") == 0;
  });
  return field || group;
}

// The first key of `object` (at JSON path `prefix`) that is no field of the table.
void reject_unknown(const json& object, const std::string& prefix) {
  for (const auto& item : object.items()) {
    const std::string path = prefix.empty() ? item.key() : prefix + "." + item.key();
    if (prefix.empty() && (item.key() == kDerivedKey || std::find(std::begin(kNameKeys), std::end(kNameKeys),
                                                                  item.key()) != std::end(kNameKeys))) {
      continue;
    }
    bool group = false;
    if (!is_field_or_group(path, group)) throw_bad_input("recipe." + path + ": unknown field");
    if (group && item.value().is_object()) reject_unknown(item.value(), path);
  }
}

}  // namespace

json field_value_json(const RecipeFields& recipe, const std::string& path) {
  json out;
  bool found = false;
  for_each_field([&](const FieldInfo& f, auto member) {
    if (path == f.path) out = value_json(member(recipe)), found = true;
  });
  if (!found) throw Error(ErrorKind::kInternal, "no recipe field '" + path + "'");
  return out;
}

std::string describe_field_changes(const RecipeFields& from, const RecipeFields& to) {
  std::string out;
  for_each_field([&](const FieldInfo& f, auto member) {
    if (member(from) == member(to)) return;
    out += (out.empty() ? "" : "; ") + std::string(f.path) + ": " + value_json(member(from)).dump() + " -> " +
           value_json(member(to)).dump();
  });
  return out;
}

json recipe_to_json(const Recipe& r) {
  json j = {{"name", r.name}, {"description", r.description}, {"source", r.source}};
  j["provenance"] = {{"status", value_json(r.provenance.status)},
                     {"upstream", r.provenance.upstream},
                     {"evidence", r.provenance.evidence}};
  for_each_field([&](const FieldInfo& f, auto member) {
    std::string pointer = std::string("/") + f.path;
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    j[json::json_pointer(pointer)] = value_json(member(r));
  });
  j[kDerivedKey] = cache_bytes_per_token(r.key_quant.format);
  return j;
}

Recipe recipe_from_json(const json& j) {
  if (!j.is_object()) throw_bad_input("recipe: expected a JSON object");
  Recipe r;
  std::string base;
  if (const auto it = j.find("base"); it != j.end()) read_value(*it, "recipe.base", base);
  if (!base.empty()) r = preset(base);
  // A preset's claim about an upstream kernel is not inherited: a recipe built on one has
  // none unless its file states one (as `recipes --json` writes it back).
  r.provenance = Provenance{};
  if (const auto it = j.find("provenance"); it != j.end()) {
    if (!it->is_object()) throw_bad_input("recipe.provenance: expected a JSON object");
    for (const auto& item : it->items()) {
      if (item.key() == "status") {
        read_value(item.value(), "recipe.provenance.status", r.provenance.status);
      } else if (item.key() == "upstream") {
        read_value(item.value(), "recipe.provenance.upstream", r.provenance.upstream);
      } else if (item.key() == "evidence") {
        read_value(item.value(), "recipe.provenance.evidence", r.provenance.evidence);
      } else {
        throw_bad_input("recipe.provenance." + item.key() + ": unknown field");
      }
    }
  }
  for (const auto& [key, member] : {std::pair{"name", &Recipe::name}, std::pair{"description", &Recipe::description},
                                    std::pair{"source", &Recipe::source}}) {
    if (const auto it = j.find(key); it != j.end()) read_value(*it, std::string("recipe.") + key, r.*member);
  }
  for_each_field([&](const FieldInfo& f, auto member) {
    if (const json* v = find_field(j, f.path)) read_value(*v, std::string("recipe.") + f.path, member(r));
  });
  if (const auto it = j.find(kDerivedKey); it != j.end()) {
    int ignored_bytes = 0;
    read_value(*it, std::string("recipe.") + kDerivedKey, ignored_bytes);
  }
  reject_unknown(j, "");
  r.validate();
  return r;
}

std::vector<Recipe> load_recipe_file(const std::string& path) {
  const std::string what = "recipe file '" + path + "'";
  const json j = parse_untrusted_json(read_untrusted_file(path, kMaxJsonFileBytes, what), what);
  std::vector<Recipe> out;
  if (j.is_array()) {
    for (const json& item : j) out.push_back(recipe_from_json(item));
  } else {
    out.push_back(recipe_from_json(j));
  }
  // Names are what the command line picks recipes by: plain, unique in the file, and a
  // preset's name only for that preset itself (a `recipes --json` round trip), never a
  // different recipe that would shadow it.
  std::set<std::string> seen;
  for (const Recipe& r : out) {
    const bool plain = !r.name.empty() && r.name.size() <= 64 &&
                       std::all_of(r.name.begin(), r.name.end(), [](char c) {
                         return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' ||
                                c == '+';
                       });
    if (!plain) {
      std::string shown = r.name.substr(0, 64);
      for (char& c : shown) c = std::isprint(static_cast<unsigned char>(c)) ? c : '?';
      throw_bad_input(what + ": recipe name '" + shown + "' must be 1-64 letters, digits, '-', '_', '.' or '+'");
    }
    if (!seen.insert(r.name).second) throw_bad_input(what + ": two recipes are named '" + r.name + "'");
    for (const Recipe& p : presets()) {
      if (p.name == r.name && recipe_to_json(p) != recipe_to_json(r)) {
        throw_bad_input(what + ": recipe '" + r.name + "' differs from the preset of that name: rename it");
      }
    }
  }
  return out;
}

json parse_untrusted_json(const std::string& text, const std::string& what) {
  // A raw NUL byte is never part of JSON text (a string holds it as \u0000), and the
  // parser would take one after the value as the end of the input: refuse it wherever it is.
  if (const size_t nul = text.find('\0'); nul != std::string::npos) {
    throw Error(ErrorKind::kBadInput, what + ": is not valid JSON (a NUL byte at offset " + std::to_string(nul) + ")");
  }
  std::vector<std::set<std::string>> names;  // of each open object, innermost last
  std::string problem;
  const auto check = [&](int depth, json::parse_event_t event, json& parsed) {
    switch (event) {
      case json::parse_event_t::object_start:
      case json::parse_event_t::array_start:
        if (depth >= kMaxJsonDepth) {
          throw Error(ErrorKind::kBadInput,
                      what + ": nested deeper than " + std::to_string(kMaxJsonDepth) + " arrays and objects");
        }
        if (event == json::parse_event_t::object_start) names.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!names.empty()) names.pop_back();
        break;
      case json::parse_event_t::key: {
        const std::string key = parsed.get<std::string>();
        if (!names.empty() && !names.back().insert(key).second) {
          throw Error(ErrorKind::kBadInput, what + ": the name \"" + key.substr(0, 80) + "\" appears twice in one object");
        }
        break;
      }
      default:
        break;
    }
    return true;
  };
  try {
    return json::parse(text, check);
  } catch (const json::exception& e) {  // syntax, UTF-8, and numbers beyond a double (1e999)
    std::string message = e.what();
    if (message.size() > 200) message = message.substr(0, 200) + "...";
    throw Error(ErrorKind::kBadInput, what + ": is not valid JSON (" + message + ")");
  }
}

std::string read_untrusted_file(const std::string& path, int64_t max_bytes, const std::string& what) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) throw Error(ErrorKind::kBadInput, what + ": cannot open (" + std::strerror(errno) + ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    const char* kind = S_ISDIR(st.st_mode) ? "a directory" : "not a regular file (a FIFO, device or socket)";
    throw Error(ErrorKind::kBadInput, what + ": is " + std::string(kind));
  }
  if (st.st_size > max_bytes) {
    ::close(fd);
    throw Error(ErrorKind::kBadInput, what + ": " + std::to_string(st.st_size) + " bytes, more than the " +
                                          std::to_string(max_bytes) + " allowed");
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t done = 0;
  while (done < text.size()) {
    const ssize_t n = ::read(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(done);
  return text;
}

}  // namespace dsaf::ref
