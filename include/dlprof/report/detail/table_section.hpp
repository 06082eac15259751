// dlprof/report/detail/table_section.hpp: a section of the report that the text and HTML
// renderers show alike: its title, the sentences that say what it found, one table, and notes.
#pragma once

#include <string>
#include <vector>

#include "dlprof/config.hpp"

DLPROF_BEGIN_NAMESPACE
namespace detail {

struct TableSection {
  std::string title;
  std::vector<std::string> lines;  ///< what the section found, a sentence each
  std::vector<std::string> headers;
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> notes;  ///< what to know to read the table right
};

}  // namespace detail
DLPROF_END_NAMESPACE
