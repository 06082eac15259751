// dlprof/analysis/short_kernel_name.hpp: a kernel's demangled name in a table's width, keeping
// apart kernels that differ: the function without its namespaces and parameters, and its first
// template argument that is not a number, simplified ("vectorized_elementwise_kernel<
// CUDAFunctor_add<BFloat16>>", "unrolled_elementwise_kernel<direct_copy_kernel_cuda lambda(float)>").
// Names without templates (cuBLAS's, Tensile's, Triton's) keep their tile in their first
// characters and stay as they are. Where two kernels still look alike, short_kernel_names shows
// more of their template arguments, then numbers them.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <cxxabi.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/text.hpp"

DLPROF_BEGIN_NAMESPACE
namespace analysis {
namespace detail {

/// The index of the bracket that closes the one opened at `open` (one of "<([{"), or npos.
inline std::size_t closing_bracket(std::string_view text, std::size_t open) noexcept {
  int depth = 0;
  for (std::size_t i = open; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '<' || c == '(' || c == '[' || c == '{') ++depth;
    // "operator()" and "->": a '>' after '-' closes nothing.
    if ((c == '>' && (i == 0 || text[i - 1] != '-')) || c == ')' || c == ']' || c == '}')
      if (--depth == 0) return i;
  }
  return std::string_view::npos;
}

/// `text` split at its commas outside brackets.
inline std::vector<std::string_view> top_level_arguments(std::string_view text) {
  std::vector<std::string_view> out;
  int depth = 0;
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '<' || c == '(' || c == '[' || c == '{') ++depth;
    if ((c == '>' && (i == 0 || text[i - 1] != '-')) || c == ')' || c == ']' || c == '}') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(text.substr(start, i - start));
      start = i + 1;
    }
  }
  out.push_back(text.substr(start));
  for (std::string_view& argument : out) {
    while (!argument.empty() && argument.front() == ' ') argument.remove_prefix(1);
    while (!argument.empty() && argument.back() == ' ') argument.remove_suffix(1);
  }
  return out;
}

constexpr bool is_identifier_char(char c) noexcept {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/// `text` without namespace and class qualifiers ("at::native::", "(anonymous namespace)::"),
/// with "ul"/"u" number suffixes kept.
inline std::string without_qualifiers(std::string_view text) {
  constexpr std::string_view kAnonymous = "(anonymous namespace)::";
  std::string out;
  std::size_t i = 0;
  while (i < text.size()) {
    if (text.substr(i, kAnonymous.size()) == kAnonymous) {
      i += kAnonymous.size();
      continue;
    }
    if (is_identifier_char(text[i])) {
      std::size_t end = i;
      while (end < text.size() && is_identifier_char(text[end])) ++end;
      if (text.substr(end, 2) == "::") {  // a qualifier: dropped
        i = end + 2;
        continue;
      }
      out.append(text.substr(i, end - i));
      i = end;
      continue;
    }
    out.push_back(text[i++]);
  }
  return out;
}

/// Whether a template argument is a number, a bool or an enum value cast ("128u", "true", "(GemmType)0").
inline bool is_value_argument(std::string_view argument) noexcept {
  if (argument == "true" || argument == "false") return true;
  if (!argument.empty() && argument.front() == '(') {
    const std::size_t close = argument.find(')');
    if (close == std::string_view::npos) return false;
    argument.remove_prefix(close + 1);
  }
  if (!argument.empty() && argument.front() == '-') argument.remove_prefix(1);
  if (argument.empty() || argument.front() < '0' || argument.front() > '9') return false;
  for (const char c : argument)
    if (!((c >= '0' && c <= '9') || c == 'u' || c == 'l' || c == 'U' || c == 'L' || c == '.')) return false;
  return true;
}

/// `text` without a trailing parameter list, " const" and "::operator": "f(int) const" is "f",
/// "sum_functor<float>::operator()()" is "sum_functor<float>".
inline std::string_view without_call_suffix(std::string_view text) noexcept {
  for (bool changed = true; changed;) {
    changed = false;
    if (text.size() >= 6 && text.substr(text.size() - 6) == " const") {
      text.remove_suffix(6);
      changed = true;
    }
    if (!text.empty() && text.back() == ')') {  // its matching '(', from the end
      int depth = 0;
      for (std::size_t i = text.size(); i-- > 0;) {
        if (text[i] == ')') ++depth;
        if (text[i] == '(' && --depth == 0) {
          text = text.substr(0, i);
          changed = true;
          break;
        }
      }
    }
    if (text.size() >= 10 && text.substr(text.size() - 10) == "::operator") {
      text.remove_suffix(10);
      changed = true;
    }
  }
  return text;
}

inline std::string simplified_argument(std::string_view argument);

/// A name that may be a template: one whose arguments hold a template or a lambda stands for the
/// last such argument (BinaryFunctor<Half, Half, Half, DivFunctor<Half>> is DivFunctor<Half>,
/// gpu_kernel_impl<lambda> the lambda); one of plain types keeps them.
inline std::string simplified_name(std::string_view text) {
  const std::size_t open = text.find('<');
  if (open == std::string_view::npos) return without_qualifiers(text);
  const std::size_t close = closing_bracket(text, open);
  if (close == std::string_view::npos) return without_qualifiers(text);
  const std::vector<std::string_view> arguments = top_level_arguments(text.substr(open + 1, close - open - 1));
  for (std::size_t i = arguments.size(); i-- > 0;)
    if (arguments[i].find('<') != std::string_view::npos || arguments[i].find("{lambda(") != std::string_view::npos)
      return simplified_argument(arguments[i]);
  std::string out = without_qualifiers(text.substr(0, open)) + "<";
  for (std::size_t i = 0; i < arguments.size(); ++i) {
    if (i != 0) out += ", ";
    out += without_qualifiers(arguments[i]);
  }
  return out + ">";
}

/// A template argument in a few words: a lambda is "holder lambda(parameters)", its holder the
/// function that defines it (or, where that function is a template of a lambda or template, what
/// that stands for); anything else is simplified_name's.
inline std::string simplified_argument(std::string_view argument) {
  const std::size_t lambda = argument.rfind("{lambda(");
  if (lambda == std::string_view::npos) return simplified_name(without_call_suffix(argument));
  // A lambda inside the argument's template arguments is that template's.
  if (const std::size_t open = argument.find('<'); open != std::string_view::npos && open < lambda) {
    const std::size_t close = closing_bracket(argument, open);
    if (close == std::string_view::npos || close > lambda) return simplified_name(argument);
  }
  // The function that defines the lambdas: the text before the first "::{lambda" outside brackets.
  std::size_t first_lambda = std::string_view::npos;
  for (std::size_t i = 0, depth = 0; i < argument.size() && first_lambda == std::string_view::npos; ++i) {
    const char c = argument[i];
    if (depth == 0 && argument.substr(i, 9) == "::{lambda") first_lambda = i;
    if (c == '<' || c == '(' || c == '[' || c == '{') ++depth;
    if (((c == '>' && (i == 0 || argument[i - 1] != '-')) || c == ')' || c == ']' || c == '}') && depth > 0) --depth;
  }
  const std::string_view holder = without_call_suffix(argument.substr(0, std::min(first_lambda, lambda)));
  const std::size_t open = holder.find('<');
  if (open != std::string_view::npos) {
    const std::size_t close = closing_bracket(holder, open);
    const std::string_view inside = close == std::string_view::npos ? std::string_view() : holder.substr(open + 1, close - open - 1);
    if (inside.find("{lambda(") != std::string_view::npos || inside.find('<') != std::string_view::npos)
      return simplified_name(holder);  // the lambda is the wrapper's loop; its argument says what runs
  }
  const std::size_t close = argument.find(")#", lambda);
  const std::string_view parameters =
      close == std::string_view::npos ? std::string_view() : argument.substr(lambda + 8, close - lambda - 8);
  return simplified_name(holder) + " lambda(" + without_qualifiers(parameters) + ")";
}

/// The parts of a demangled kernel name: its function (unqualified) and template arguments.
struct KernelNameParts {
  std::string function;
  std::string name;  ///< the name without "(anonymous namespace)::", which the arguments view
  std::vector<std::string_view> arguments;
  bool templated = false;
};

inline KernelNameParts kernel_name_parts(std::string_view in_trace) {
  constexpr std::string_view kAnonymous = "(anonymous namespace)::";
  KernelNameParts parts;
  // A name the trace left mangled (ROCm's Composable Kernel, "_ZN7ck_tile6kentry...") is demangled.
  std::string_view demangled = in_trace;
  std::string demangled_storage;
  if (dlprof::detail::starts_with(in_trace, "_Z")) {
    int status = 0;
    const std::string mangled(in_trace);
    if (char* text = abi::__cxa_demangle(mangled.c_str(), nullptr, nullptr, &status); text != nullptr) {
      if (status == 0) demangled_storage = text;
      std::free(text);
    }
    if (!demangled_storage.empty()) demangled = demangled_storage;
  }
  for (std::size_t at = 0; at < demangled.size();) {
    const std::size_t found = demangled.find(kAnonymous, at);
    parts.name.append(demangled.substr(at, found == std::string_view::npos ? found : found - at));
    at = found == std::string_view::npos ? demangled.size() : found + kAnonymous.size();
  }
  const std::string_view name = parts.name;
  // The parameters' '(' outside brackets ends the function; a space outside brackets before it
  // ends a return type ("void ", "std::enable_if<...>::type ").
  std::size_t start = 0, template_open = std::string_view::npos, parameters = name.size();
  int depth = 0;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (depth == 0 && c == '(') {
      parameters = i;
      break;
    }
    if (depth == 0 && c == ' ') {
      start = i + 1;
      template_open = std::string_view::npos;
    }
    if (depth == 0 && c == '<' && template_open == std::string_view::npos) template_open = i;
    if (c == '<' || c == '[' || c == '{') ++depth;
    if ((c == '>' && (i == 0 || name[i - 1] != '-')) || c == ']' || c == '}') depth = depth > 0 ? depth - 1 : 0;
  }
  const std::size_t function_end = template_open == std::string_view::npos ? parameters : template_open;
  std::string_view function = name.substr(start, function_end - start);
  if (const std::size_t colons = function.rfind("::"); colons != std::string_view::npos) function.remove_prefix(colons + 2);
  parts.function = std::string(function);
  if (template_open != std::string_view::npos) {
    const std::size_t close = closing_bracket(name, template_open);
    if (close != std::string_view::npos) {
      parts.templated = true;
      parts.arguments = top_level_arguments(name.substr(template_open + 1, close - template_open - 1));
    }
  }
  return parts;
}

/// A kernel's short name in two parts: its function, and "<argument>" (empty for a name without
/// template arguments). CUTLASS's Kernel<Name> wrappers are their argument alone.
struct ShortKernelName {
  std::string function;
  std::string argument;
};

/// Whether an underscore-separated token of a library kernel's name gives its tile: "128x64",
/// "MT128x128x64", "tilesize128x128x32", "MI16x16x1".
inline bool is_tile_token(std::string_view token) noexcept {
  std::size_t i = 0;
  while (i < token.size() && !(token[i] >= '0' && token[i] <= '9')) ++i;
  const std::size_t x = token.find('x', i);
  return i < token.size() && x != std::string_view::npos && x + 1 < token.size() && token[x + 1] >= '0' && token[x + 1] <= '9' &&
         token.find_first_not_of("0123456789", i) == x;
}

/// A name without template arguments (cuBLAS's, CUTLASS's, Tensile's, Triton's): from its first
/// tile token on it is the argument that fit_kernel_name keeps, to the name's end where that fits
/// in `width`, else the tile tokens alone.
inline ShortKernelName untemplated_short_name(std::string_view name, std::size_t width) {
  for (std::size_t at = name.find('_'); at != std::string_view::npos; at = name.find('_', at + 1)) {
    const std::size_t end = std::min(name.find('_', at + 1), name.size());
    if (!is_tile_token(name.substr(at + 1, end - at - 1))) continue;
    if (dlprof::detail::text_width(name.substr(at)) + 3 + 4 <= width) return {std::string(name.substr(0, at)), std::string(name.substr(at))};
    std::size_t tiles_end = end;
    while (tiles_end < name.size()) {
      const std::size_t next = std::min(name.find('_', tiles_end + 1), name.size());
      if (!is_tile_token(name.substr(tiles_end + 1, next - tiles_end - 1))) break;
      tiles_end = next;
    }
    return {std::string(name.substr(0, at)), std::string(name.substr(at, tiles_end - at))};
  }
  return {std::string(name), {}};
}

inline ShortKernelName short_kernel_name_parts(const KernelNameParts& parts, std::size_t width) {
  // A plain function loses its parameters; a library's name keeps its tile.
  if (!parts.templated) return untemplated_short_name(parts.function.empty() ? std::string_view(parts.name) : std::string_view(parts.function), width);
  std::string argument;
  for (const std::string_view candidate : parts.arguments)
    if (!is_value_argument(candidate)) {
      argument = simplified_argument(candidate);
      break;
    }
  if (argument.empty()) {  // values alone (DeepGEMM's shapes and blocks): the first three
    for (std::size_t i = 0; i < parts.arguments.size() && i < 3; ++i)
      argument += (i == 0 ? "" : ", ") + std::string(parts.arguments[i]);
    if (parts.arguments.size() > 3) argument += ", ...";
  }
  if ((parts.function == "Kernel" || parts.function == "Kernel2" || parts.function == "device_kernel") &&
      argument.find('<') == std::string::npos && argument.find(' ') == std::string::npos)
    return untemplated_short_name(argument, width);
  return {parts.function, "<" + argument + ">"};
}

/// `name` in `width` characters, its argument and suffix kept whole where they leave the function
/// four characters and "...": the argument tells kernels of one function apart.
inline std::string fit_kernel_name(const ShortKernelName& name, std::string_view suffix, std::size_t width) {
  const std::string rest = name.argument + std::string(suffix);
  const std::size_t rest_width = dlprof::detail::text_width(rest);
  if (dlprof::detail::text_width(name.function) + rest_width <= width) return name.function + rest;
  if (rest_width + 3 + 4 <= width) return dlprof::detail::shorten(name.function, width - rest_width) + rest;
  return dlprof::detail::shorten(name.function + rest, width);
}

}  // namespace detail

/// A kernel's demangled name in short (see above).
inline std::string short_kernel_name(std::string_view name) {
  const detail::ShortKernelName parts = detail::short_kernel_name_parts(detail::kernel_name_parts(name), SIZE_MAX / 2);
  return parts.function + parts.argument;
}

/// The short names of distinct kernels, each at most `width` characters, no two alike: where two
/// would be, each adds the template arguments in which they differ when those are short
/// ("softmax_warp_forward<float> (10, true)"), else a number ("#2", in the order given; where
/// even that leaves two alike, the later one's place in `names`).
inline std::vector<std::string> short_kernel_names(const std::vector<std::string_view>& names, std::size_t width) {
  constexpr std::size_t kMaxDifference = 16;
  std::vector<detail::KernelNameParts> parts;
  std::vector<detail::ShortKernelName> shorts;
  std::vector<std::string> out(names.size());
  std::map<std::string, std::vector<std::size_t>> alike;
  for (std::size_t i = 0; i < names.size(); ++i) {
    parts.push_back(detail::kernel_name_parts(names[i]));
    shorts.push_back(detail::short_kernel_name_parts(parts.back(), width));
    out[i] = detail::fit_kernel_name(shorts.back(), {}, width);
    alike[out[i]].push_back(i);
  }
  for (const auto& entry : alike) {
    const std::vector<std::size_t>& group = entry.second;
    if (group.size() < 2) continue;
    // The argument positions in which the group differs, where all have as many.
    std::vector<std::size_t> differing;
    const std::size_t count = parts[group.front()].arguments.size();
    bool same_count = true;
    for (const std::size_t i : group) same_count = same_count && parts[i].arguments.size() == count;
    for (std::size_t at = 0; same_count && at < count; ++at)
      for (const std::size_t i : group)
        if (parts[i].arguments[at] != parts[group.front()].arguments[at]) {
          differing.push_back(at);
          break;
        }
    std::map<std::string, std::size_t> suffixes;
    std::vector<std::string> suffix_of(group.size());
    for (std::size_t n = 0; n < group.size(); ++n) {
      std::string difference;
      for (const std::size_t at : differing) {
        if (!difference.empty()) difference += ", ";
        difference += detail::simplified_argument(parts[group[n]].arguments[at]);
      }
      suffix_of[n] = " (" + difference + ")";
      if (differing.empty() || difference.size() > kMaxDifference) suffix_of[n].clear();
      ++suffixes[suffix_of[n]];
    }
    for (std::size_t n = 0; n < group.size(); ++n) {
      const bool told_apart = !suffix_of[n].empty() && suffixes[suffix_of[n]] == 1;
      out[group[n]] = detail::fit_kernel_name(shorts[group[n]], told_apart ? suffix_of[n] : " #" + std::to_string(n + 1), width);
    }
  }
  // Names the width still cuts alike (numbered in two groups, or differing where the cut falls):
  // each but the first is numbered by its place in `names`, which no other has.
  std::map<std::string, std::vector<std::size_t>> still_alike;
  for (std::size_t i = 0; i < out.size(); ++i) still_alike[out[i]].push_back(i);
  for (const auto& entry : still_alike)
    for (std::size_t n = 1; n < entry.second.size(); ++n)
      out[entry.second[n]] = detail::fit_kernel_name(shorts[entry.second[n]], " #" + std::to_string(entry.second[n] + 1), width);
  return out;
}

}  // namespace analysis
DLPROF_END_NAMESPACE
