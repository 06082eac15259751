// A minimal NVTX tool, injected the way Nsight Systems injects itself (NVTX_INJECTION64_PATH):
// it receives every NVTX call of the process and appends one line per call to the file named by
// DLPROF_NVTX_TOOL_LOG, so a test can check what a profiler attached through NVTX would see.
//
//   domain <name>                          nvtxDomainCreateA
//   category <id> <name>                   nvtxDomainNameCategoryA
//   push <domain> <category> <argb> <msg>  nvtxDomainRangePushEx (registered or ASCII message)
//   pop <domain>                           nvtxDomainRangePop
//   mark <domain> <msg>                    nvtxDomainMarkEx
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

namespace {

std::mutex g_mutex;  // guards every static below: NVTX calls arrive from any thread
std::FILE* g_log = nullptr;
std::map<const void*, std::string> g_domain_names;
std::map<const void*, std::string> g_registered_strings;
int g_next_handle = 1;

void log_line(const std::string& line) {
  if (g_log == nullptr) return;
  std::fputs(line.c_str(), g_log);
  std::fputc('\n', g_log);
  std::fflush(g_log);
}

const void* new_handle() { return reinterpret_cast<const void*>(static_cast<std::uintptr_t>(g_next_handle++) << 4); }

std::string domain_name(nvtxDomainHandle_t domain) {
  const auto found = g_domain_names.find(domain);
  return found == g_domain_names.end() ? "<default>" : found->second;
}

std::string message_of(const nvtxEventAttributes_t* attributes) {
  switch (attributes->messageType) {
    case NVTX_MESSAGE_TYPE_ASCII: return std::string("ascii:") + attributes->message.ascii;
    case NVTX_MESSAGE_TYPE_REGISTERED: {
      const auto found = g_registered_strings.find(attributes->message.registered);
      return found == g_registered_strings.end() ? "registered:<unknown>" : "registered:" + found->second;
    }
    default: return "<other message type>";
  }
}

nvtxDomainHandle_t domain_create(const char* name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const void* handle = new_handle();
  g_domain_names[handle] = name;
  log_line(std::string("domain ") + name);
  return static_cast<nvtxDomainHandle_t>(const_cast<void*>(handle));
}

void domain_name_category(nvtxDomainHandle_t domain, std::uint32_t category, const char* name) {
  std::lock_guard<std::mutex> lock(g_mutex);
  log_line("category " + domain_name(domain) + " " + std::to_string(category) + " " + name);
}

nvtxStringHandle_t domain_register_string(nvtxDomainHandle_t, const char* text) {
  std::lock_guard<std::mutex> lock(g_mutex);
  const void* handle = new_handle();
  g_registered_strings[handle] = text;
  return static_cast<nvtxStringHandle_t>(const_cast<void*>(handle));
}

int domain_range_push(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* attributes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  char color[16];
  std::snprintf(color, sizeof(color), "%08x", attributes->color);
  log_line("push " + domain_name(domain) + " " + std::to_string(attributes->category) + " " + color + " " +
           message_of(attributes));
  return 0;
}

int domain_range_pop(nvtxDomainHandle_t domain) {
  std::lock_guard<std::mutex> lock(g_mutex);
  log_line("pop " + domain_name(domain));
  return 0;
}

void domain_mark(nvtxDomainHandle_t domain, const nvtxEventAttributes_t* attributes) {
  std::lock_guard<std::mutex> lock(g_mutex);
  log_line("mark " + domain_name(domain) + " " + message_of(attributes));
}

template <class Function>
void install(NvtxFunctionTable table, unsigned size, unsigned id, Function function) {
  if (id <= size && table[id] != nullptr) *table[id] = reinterpret_cast<NvtxFunctionPointer>(function);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjectionNvtx2(NvtxGetExportTableFunc_t get_export_table) {
  if (const char* path = std::getenv("DLPROF_NVTX_TOOL_LOG")) g_log = std::fopen(path, "w");
  const auto* callbacks = static_cast<const NvtxExportTableCallbacks*>(get_export_table(NVTX_ETID_CALLBACKS));
  if (callbacks == nullptr) return 0;
  NvtxFunctionTable table = nullptr;
  unsigned size = 0;
  if (!callbacks->GetModuleFunctionTable(NVTX_CB_MODULE_CORE2, &table, &size)) return 0;
  install(table, size, NVTX_CBID_CORE2_DomainCreateA, &domain_create);
  install(table, size, NVTX_CBID_CORE2_DomainNameCategoryA, &domain_name_category);
  install(table, size, NVTX_CBID_CORE2_DomainRegisterStringA, &domain_register_string);
  install(table, size, NVTX_CBID_CORE2_DomainRangePushEx, &domain_range_push);
  install(table, size, NVTX_CBID_CORE2_DomainRangePop, &domain_range_pop);
  install(table, size, NVTX_CBID_CORE2_DomainMarkEx, &domain_mark);
  return 1;
}
