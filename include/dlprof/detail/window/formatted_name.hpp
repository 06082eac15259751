// dlprof/detail/window/formatted_name.hpp: the name of a DLPROF_RANGE_F whose arguments were kept
// (recording/format_arguments.hpp), formatted when its window is assembled.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include <fmt/args.h>
#include <fmt/core.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/recording/format_arguments.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

/// `format` applied to the kept `arguments`, as fmt would have formatted the values they were
/// kept from. Arguments no range keeps (types or sizes a damaged crash file may hold), or a
/// format they do not fit, give the format itself: a name, never an error.
inline std::string format_with_kept_arguments(std::string_view format, const FormatArguments& arguments) {
  unsigned char bytes[FormatArguments::kBytes];
  std::memcpy(bytes, arguments.words, sizeof(bytes));
  fmt::dynamic_format_arg_store<fmt::format_context> store;
  std::size_t offset = 0;
  const auto read = [&](auto value) {
    std::memcpy(&value, bytes + offset, sizeof(value));
    offset += sizeof(value);
    return value;
  };
  for (std::uint32_t types = arguments.types; types != 0; types >>= 4) {
    const auto type = static_cast<FormatArgumentType>(types & 0xFu);
    const std::size_t size = format_argument_size(type);
    if (size == 0 || offset + size > sizeof(bytes)) return std::string(format);
    switch (type) {
      case FormatArgumentType::Bool: store.push_back(read(std::int32_t{}) != 0); break;
      case FormatArgumentType::Char: store.push_back(static_cast<char>(read(std::int32_t{}))); break;
      case FormatArgumentType::Int32: store.push_back(read(std::int32_t{})); break;
      case FormatArgumentType::UInt32: store.push_back(read(std::uint32_t{})); break;
      case FormatArgumentType::Int64: store.push_back(read(std::int64_t{})); break;
      case FormatArgumentType::UInt64: store.push_back(read(std::uint64_t{})); break;
      case FormatArgumentType::Float: store.push_back(read(float{})); break;
      case FormatArgumentType::Double: store.push_back(read(double{})); break;
      case FormatArgumentType::Pointer: store.push_back(read(static_cast<const void*>(nullptr))); break;
      case FormatArgumentType::End: break;
    }
  }
  try {
    return fmt::vformat(fmt::string_view(format.data(), format.size()), store);
  } catch (...) {  // a format these arguments do not fit, or no memory
    return std::string(format);
  }
}

}  // namespace detail
DLPROF_END_NAMESPACE
