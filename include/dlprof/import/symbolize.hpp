// dlprof/import/symbolize.hpp: the return addresses of a trace's call stacks (with_stack) as the
// functions and lines they are in, read offline from the modules the trace names with elfutils'
// libdw (link dlprof::symbolize). Never on the recording process's path: the trace carries
// addresses and its module map, and this runs where the report is made.
//
//   dlprof::Trace trace = dlprof::read_trace("run.pt.trace.json.gz");
//   const dlprof::SymbolizeResult result = dlprof::symbolize_stacks(trace);
//   for (const std::string& problem : result.problems) std::cerr << problem << '\n';
//
// A frame becomes "file(line): function" as torch.profiler spells its Python frames ("train.cpp(142):
// Block::forward(at::Tensor)"), the function demangled; where the module has no line table,
// "function (libfoo.so+0x1a2b)". A frame inside functions the compiler inlined becomes one frame for
// each, the innermost first, all with the frame's address. The fast mode (SymbolizeOptions::lines
// false) gives function names only. A module that is missing, stripped or not the one the trace
// recorded (another build id) is named in the result's problems and its frames keep their
// addresses: nothing stops the report.
#pragma once

#include <cxxabi.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <dwarf.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "dlprof/config.hpp"
#include "dlprof/detail/stack_symbols.hpp"
#include "dlprof/format/call_stack.hpp"
#include "dlprof/trace.hpp"

DLPROF_BEGIN_NAMESPACE

struct SymbolizeOptions {
  /// Source files and lines, and a frame for each inlined function; false: function names only,
  /// several times faster.
  bool lines = true;
};

struct SymbolizeResult {
  std::size_t frames = 0;      ///< frames with an address and no text before
  std::size_t symbolised = 0;  ///< of them, those given a function
  /// One line per module that could not be read as the trace recorded it, naming the module and
  /// why; its frames keep their addresses.
  std::vector<std::string> problems;
};

namespace detail {

/// `name` demangled where it is a mangled C++ name, as it is otherwise.
inline std::string demangled(const char* name) {
  if (name == nullptr) return {};
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> plain(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && plain != nullptr ? std::string(plain.get()) : std::string(name);
}

/// The build id of a module libdwfl has read, in hex; empty when it has none.
inline std::string module_build_id(Dwfl_Module* module) {
  const unsigned char* bits = nullptr;
  GElf_Addr vaddr = 0;
  const int length = ::dwfl_module_build_id(module, &bits, &vaddr);
  std::string hex;
  for (int i = 0; i < length; ++i) fmt::format_to(std::back_inserter(hex), "{:02x}", bits[i]);
  return hex;
}

/// The name of a function's DIE (a subprogram or an inlined subroutine), demangled from its
/// linkage name where it has one (looked up through its abstract origin), else `symbol` (the ELF
/// symbol of a function's own code, which names a function of internal linkage with its
/// namespaces and parameters) where given, else its plain name.
inline std::string function_name(Dwarf_Die* die, const char* symbol = nullptr) {
  Dwarf_Attribute attribute;
  for (const int name : {DW_AT_linkage_name, DW_AT_MIPS_linkage_name})
    if (::dwarf_attr_integrate(die, name, &attribute) != nullptr)
      if (const char* linkage = ::dwarf_formstring(&attribute)) return demangled(linkage);
  if (symbol != nullptr) return demangled(symbol);
  const char* plain = ::dwarf_diename(die);
  return plain != nullptr ? std::string(plain) : std::string("??");
}

/// Symbolises addresses of the modules of one trace, each read once.
class Symboliser {
 public:
  Symboliser(const std::vector<LoadedModule>& modules, const SymbolizeOptions& options)
      : modules_(modules), options_(options), read_(modules.size()) {
    callbacks_.find_elf = ::dwfl_build_id_find_elf;
    callbacks_.find_debuginfo = ::dwfl_standard_find_debuginfo;
    callbacks_.section_address = ::dwfl_offline_section_address;
    callbacks_.debuginfo_path = nullptr;
    dwfl_ = ::dwfl_begin(&callbacks_);
  }
  ~Symboliser() {
    if (dwfl_ != nullptr) ::dwfl_end(dwfl_);
  }
  Symboliser(const Symboliser&) = delete;
  Symboliser& operator=(const Symboliser&) = delete;

  /// The frames at return address `address`, the innermost first; empty where it cannot be
  /// symbolised.
  std::vector<std::string> frames_at(std::uint64_t address) {
    std::vector<std::string> frames;
    const LoadedModule* module = module_holding(modules_, address);
    if (module == nullptr || dwfl_ == nullptr) return frames;
    Dwfl_Module* read = module_read(static_cast<std::size_t>(module - modules_.data()));
    if (read == nullptr) return frames;
    // A return address is the instruction after the call: the call is the byte before it.
    const Dwarf_Addr pc = address - 1;
    const std::string where = fmt::format("{}+{:#x}", module_file_name(module->path), address - module->base);
    if (options_.lines && append_inlined_frames(read, pc, frames)) return frames;
    const char* symbol = ::dwfl_module_addrname(read, pc);
    if (symbol == nullptr) return frames;
    // libdwfl keeps a symbol's name where it read it: the pointer names the symbol.
    auto [cached, inserted] = demangled_symbols_.try_emplace(symbol);
    if (inserted) cached->second = demangled(symbol);
    const std::string& frame = cached->second;
    if (options_.lines)
      if (Dwfl_Line* line = ::dwfl_module_getsrc(read, pc)) {
        int number = 0;
        if (const char* file = ::dwfl_lineinfo(line, nullptr, &number, nullptr, nullptr, nullptr)) {
          frames.push_back(fmt::format("{}({}): {}", file, number, frame));
          return frames;
        }
      }
    frames.push_back(fmt::format("{} ({})", frame, where));
    return frames;
  }

  std::vector<std::string> take_problems() { return std::move(problems_); }

 private:
  struct ReadModule {
    bool tried = false;
    Dwfl_Module* module = nullptr;
  };

  /// The module at `index` as libdwfl reads it from its path at its recorded load bias; null,
  /// with a problem noted once, where it is missing, changed or without symbols.
  Dwfl_Module* module_read(std::size_t index) {
    ReadModule& read = read_[index];
    if (read.tried) return read.module;
    read.tried = true;
    const LoadedModule& module = modules_[index];
    const std::string name(module_file_name(module.path));
    if (::access(module.path.c_str(), R_OK) != 0) {
      problems_.push_back(fmt::format("{}: cannot be read ({}): its frames keep their addresses", module.path, std::strerror(errno)));
      return nullptr;
    }
    ::dwfl_report_begin_add(dwfl_);
    Dwfl_Module* reported = ::dwfl_report_elf(dwfl_, name.c_str(), module.path.c_str(), -1, module.base, /*add_p_vaddr=*/true);
    ::dwfl_report_end(dwfl_, nullptr, nullptr);
    if (reported == nullptr) {
      problems_.push_back(fmt::format("{}: not an ELF file libdw reads ({}): its frames keep their addresses", module.path,
                                      ::dwfl_errmsg(-1)));
      return nullptr;
    }
    if (!module.build_id.empty()) {
      const std::string now = module_build_id(reported);
      if (now != module.build_id) {
        problems_.push_back(fmt::format("{}: changed since the run (build id {}, the trace's {}): its frames keep their addresses",
                                        module.path, now.empty() ? "none" : now, module.build_id));
        return nullptr;
      }
    }
    if (::dwfl_module_getsymtab(reported) <= 0) {
      Dwarf_Addr bias = 0;
      if (::dwfl_module_getdwarf(reported, &bias) == nullptr) {
        problems_.push_back(fmt::format("{}: stripped (no symbols, no debug information): its frames keep their addresses",
                                        module.path));
        return nullptr;
      }
    }
    read.module = reported;
    return reported;
  }

  /// The functions of one compile unit, by address: its concrete subprograms and the calls
  /// inlined into them, each with the function it is inlined into. Read once per unit, so that an
  /// address's chain of inlined calls is a binary search rather than a walk of the unit's DIEs.
  struct UnitFunctions {
    static constexpr std::uint32_t kNone = UINT32_MAX;
    struct Function {
      Dwarf_Off die = 0;                 // read again for its name
      std::uint32_t caller = kNone;      // an inlined call: the function it is inlined into
      std::uint32_t first_piece = 0;     // its address ranges: pieces[first_piece, +piece_count)
      std::uint32_t piece_count = 0;
      Dwarf_Word call_file = 0;          // an inlined call: where it is in its caller
      Dwarf_Word call_line = 0;
      bool inlined = false;
    };
    struct Piece {
      Dwarf_Addr low = 0;
      Dwarf_Addr high = 0;
      std::uint32_t function = 0;
    };
    std::vector<Function> functions;
    std::vector<Piece> pieces;   // by function
    std::vector<Piece> by_low;   // the same, by start address
    std::unordered_map<Dwarf_Off, std::string> names;

    bool holds(std::uint32_t function, Dwarf_Addr pc) const noexcept {
      const Function& f = functions[function];
      for (std::uint32_t i = 0; i < f.piece_count; ++i)
        if (pieces[f.first_piece + i].low <= pc && pc < pieces[f.first_piece + i].high) return true;
      return false;
    }

    std::uint32_t depth_of(std::uint32_t function) const noexcept {
      std::uint32_t depth = 0;
      while ((function = functions[function].caller) != kNone) ++depth;
      return depth;
    }

    /// The innermost function holding `pc`, kNone where none does. Functions nest, but an inlined
    /// call's code may be split into pieces that interleave with its siblings': the pieces that
    /// start before `pc` are tried from the nearest back, with the functions around the nearest,
    /// and the deepest that holds `pc` wins.
    std::uint32_t innermost_at(Dwarf_Addr pc) const noexcept {
      constexpr int kPiecesTried = 256;
      auto after = std::upper_bound(by_low.begin(), by_low.end(), pc, [](Dwarf_Addr at, const Piece& piece) { return at < piece.low; });
      if (after == by_low.begin()) return kNone;
      std::uint32_t best = kNone;
      std::uint32_t best_depth = 0;
      const auto consider = [&](std::uint32_t function) {
        const std::uint32_t depth = depth_of(function);
        if (best == kNone || depth > best_depth) {
          best = function;
          best_depth = depth;
        }
      };
      for (std::uint32_t function = (after - 1)->function; function != kNone; function = functions[function].caller)
        if (holds(function, pc)) {
          consider(function);
          break;
        }
      for (int tried = 0; after != by_low.begin() && tried < kPiecesTried; ++tried) {
        --after;
        if (pc < after->high) consider(after->function);
      }
      return best;
    }

    void collect(Dwarf_Die* parent, std::uint32_t caller) {
      Dwarf_Die child;
      if (::dwarf_child(parent, &child) != 0) return;
      do {
        const int tag = ::dwarf_tag(&child);
        std::uint32_t inside = caller;
        if (tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine) {
          Function function;
          function.die = ::dwarf_dieoffset(&child);
          function.inlined = tag == DW_TAG_inlined_subroutine;
          function.caller = function.inlined ? caller : kNone;
          function.first_piece = static_cast<std::uint32_t>(pieces.size());
          const auto index = static_cast<std::uint32_t>(functions.size());
          Dwarf_Addr base = 0, low = 0, high = 0;
          for (std::ptrdiff_t offset = 0; (offset = ::dwarf_ranges(&child, offset, &base, &low, &high)) > 0;)
            if (low < high) pieces.push_back(Piece{low, high, index});
          function.piece_count = static_cast<std::uint32_t>(pieces.size()) - function.first_piece;
          if (function.piece_count != 0) {  // declarations and abstract instances have no code
            Dwarf_Attribute attribute;
            if (function.inlined) {
              ::dwarf_formudata(::dwarf_attr(&child, DW_AT_call_file, &attribute), &function.call_file);
              ::dwarf_formudata(::dwarf_attr(&child, DW_AT_call_line, &attribute), &function.call_line);
            }
            functions.push_back(function);
            inside = index;
          }
        }
        if (::dwarf_haschildren(&child)) collect(&child, inside);
      } while (::dwarf_siblingof(&child, &child) == 0);
    }
  };

  /// Where the module has DWARF for `pc`: one frame per function inlined there, then the function
  /// they are inlined into, each at its line (the innermost at the line table's, the others at
  /// the call site of the one inside them). Returns false without DWARF for `pc`.
  bool append_inlined_frames(Dwfl_Module* module, Dwarf_Addr pc, std::vector<std::string>& frames) {
    Dwarf_Addr bias = 0;
    Dwarf_Die* unit_die = ::dwfl_module_addrdie(module, pc, &bias);
    if (unit_die == nullptr) return false;
    Dwarf_Addr module_bias = 0;
    Dwarf* dwarf = ::dwfl_module_getdwarf(module, &module_bias);
    if (dwarf == nullptr) return false;
    auto [found, inserted] = units_.try_emplace(std::make_pair(module, ::dwarf_dieoffset(unit_die)));
    UnitFunctions& unit = found->second;
    if (inserted) {
      unit.collect(unit_die, UnitFunctions::kNone);
      unit.by_low = unit.pieces;
      std::sort(unit.by_low.begin(), unit.by_low.end(), [](const auto& a, const auto& b) { return a.low < b.low; });
    }
    const Dwarf_Addr at = pc - bias;
    std::uint32_t function = unit.innermost_at(at);
    if (function == UnitFunctions::kNone) return false;
    std::string file = "??";
    int line = 0;
    if (Dwarf_Line* row = ::dwarf_getsrc_die(unit_die, at)) {
      if (const char* name = ::dwarf_linesrc(row, nullptr, nullptr)) file = name;
      ::dwarf_lineno(row, &line);
    }
    Dwarf_Files* files = nullptr;
    std::size_t file_count = 0;
    const bool have_files = ::dwarf_getsrcfiles(unit_die, &files, &file_count) == 0;
    for (; function != UnitFunctions::kNone; function = unit.functions[function].caller) {
      const UnitFunctions::Function& current = unit.functions[function];
      auto [name, named] = unit.names.try_emplace(current.die);
      if (named) {
        Dwarf_Die die;
        const char* symbol = current.inlined ? nullptr : ::dwfl_module_addrname(module, pc);
        name->second = ::dwarf_offdie(dwarf, current.die, &die) != nullptr ? function_name(&die, symbol) : std::string("??");
      }
      frames.push_back(fmt::format("{}({}): {}", file, line, name->second));
      if (!current.inlined) break;
      // The function it is inlined into was at this call's site.
      file = "??";
      if (have_files && current.call_file < file_count)
        if (const char* name_of_file = ::dwarf_filesrc(files, current.call_file, nullptr, nullptr)) file = name_of_file;
      line = static_cast<int>(current.call_line);
    }
    return true;
  }

  const std::vector<LoadedModule>& modules_;
  SymbolizeOptions options_;
  Dwfl_Callbacks callbacks_{};
  Dwfl* dwfl_ = nullptr;
  std::vector<ReadModule> read_;
  std::map<std::pair<Dwfl_Module*, Dwarf_Off>, UnitFunctions> units_;  // by module and unit DIE
  std::unordered_map<const char*, std::string> demangled_symbols_;  // by the name libdwfl holds
  std::vector<std::string> problems_;
};

}  // namespace detail

/// Gives the frames of `trace`'s call stacks that have an address and no text their functions
/// and lines (see the header comment). Stacks whose frames are inlined into several grow; frames
/// already text (Python's, or symbolised before) are left as they are.
inline SymbolizeResult symbolize_stacks(Trace& trace, const SymbolizeOptions& options = {}) {
  SymbolizeResult result;
  detail::Symboliser symboliser(trace.modules, options);
  std::unordered_map<std::uint64_t, std::vector<std::uint32_t>> texts_at;  // an address's frames as name indices
  std::unordered_map<std::string, std::uint32_t> name_index;
  const auto index_of = [&](std::string text) {
    auto [found, inserted] = name_index.try_emplace(std::move(text), static_cast<std::uint32_t>(trace.names.size()));
    if (inserted) trace.names.push_back(found->first);
    return found->second;
  };
  std::vector<StackFrame> frames;
  frames.reserve(trace.stack_frames.size());
  for (CallStack& stack : trace.stacks) {
    const std::uint32_t first = static_cast<std::uint32_t>(frames.size());
    for (std::uint32_t i = 0; i < stack.depth; ++i) {
      const StackFrame& frame = trace.stack_frames[stack.first + i];
      if (frame.text != StackFrame::kNoText || frame.address == 0) {
        frames.push_back(frame);
        continue;
      }
      ++result.frames;
      auto [texts, inserted] = texts_at.try_emplace(frame.address);
      if (inserted)
        for (std::string& text : symboliser.frames_at(frame.address)) texts->second.push_back(index_of(std::move(text)));
      if (texts->second.empty()) {
        frames.push_back(frame);
        continue;
      }
      ++result.symbolised;
      for (const std::uint32_t text : texts->second) frames.push_back(StackFrame{frame.address, text});
    }
    stack = CallStack{first, static_cast<std::uint32_t>(frames.size()) - first};
  }
  trace.stack_frames = std::move(frames);
  result.problems = symboliser.take_problems();
  return result;
}

namespace detail {
/// In a program that links dlprof::symbolize: a Profiler's trace with its frames symbolised.
template <>
struct StackSymbols<true> {
  static const Trace& of(const Trace& trace, Trace& copy) {
    const bool unsymbolised = std::any_of(trace.stack_frames.begin(), trace.stack_frames.end(), [](const StackFrame& frame) {
      return frame.text == StackFrame::kNoText && frame.address != 0;
    });
    if (!unsymbolised) return trace;
    copy = trace;
    symbolize_stacks(copy);
    return copy;
  }
};
}  // namespace detail

DLPROF_END_NAMESPACE
