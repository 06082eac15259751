// The report (dlprof/report.hpp) of hand-built traces whose every number is worked out below, in
// text, JSON and HTML; of torch.profiler's reference traces where the reader is built; and from
// the Profiler, in-process.
#include <dlprof/profiler.hpp>
#include <dlprof/report.hpp>

#include "test_files.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <regex>
#include <sys/wait.h>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "analysis_trace_builder.hpp"

#if defined(DLPROF_HAS_IMPORT) && DLPROF_HAS_IMPORT
#  include <dlprof/import/chrome_trace.hpp>
#endif

namespace {

using dlprof_test::is_valid_utf8;
using dlprof_test::kMs;
using dlprof_test::kNcclAllReduce;
using ::testing::HasSubstr;
using ::testing::Not;
using Json = nlohmann::json;

constexpr std::string_view kGemm = "void gemm<float, 4>(T&, \"x\")";
const std::string kLongKernel = "void long_kernel<" + std::string(150, 'a') + ">(int, float*)";

// One rank, two steps (ns; ms below):
//   step 1 [0, 2]: DataLoader range [0.1, 1.0]; aten::mm [1.0, 1.5] launches (call [1.1, 1.11])
//                  the gemm kernel [1.2, 1.8]
//   step 2 [2, 5]: calls [2.1, 2.11] and [2.12, 2.13] launch the NCCL kernel [2.2, 4.0] and the
//                  long-named kernel [4.0, 4.1]
// Step roles: step 1 Kernel 0.6, Runtime 0.01, DataLoader 0.9, CPU Exec 0.5 - 0.3 - 0.01 = 0.19,
// Other 0.3; step 2 Kernel 1.9, Runtime 0.02, Other 1.08. Average 2.5: Kernel 1.25 (50.0%),
// Runtime 0.015 (0.6%), DataLoader 0.45 (18.0%), CPU Exec 0.095 (3.8%), Other 0.69 (27.6%).
// GPU 0 busy 2.5 of 5 ms: 50.0%. HTA: kernel time 4.1 - 1.2 = 2.9, idle 0.4 (13.8%), compute
// 0.6 + 0.1 = 0.7 (24.1%), non-compute (NCCL) 1.8 (62.1%); types COMMUNICATION 1.8 (72.0%),
// COMPUTATION 0.7 (28.0%).
dlprof_test::AnalysisTraceBuilder one_rank_builder(std::int64_t last_step_end = 5 * kMs) {
  dlprof_test::AnalysisTraceBuilder builder;
  builder.device(0, "A100", 8)
      .step(1, 0, 2 * kMs)
      .step(2, 2 * kMs, last_step_end)
      .range("enumerate(DataLoader)#Loader.__next__", kMs / 10, kMs, dlprof::Category::DataLoader)
      .op("aten::mm", kMs, 1'500'000, 7)
      .call("cudaLaunchKernel", 1'100'000, 1'110'000, 1, 7)
      .kernel(kGemm, 1'200'000, 1'800'000, 1, 7)
      .call("cudaLaunchKernel", 2'100'000, 2'110'000, 2)
      .kernel(kNcclAllReduce, 2'200'000, 4 * kMs, 2)
      .call("cudaLaunchKernel", 2'120'000, 2'130'000, 3)
      .kernel(kLongKernel, 4 * kMs, 4'100'000, 3);
  return builder;
}

void add_memory(dlprof::Trace& trace) {
  trace.devices[0].total_global_mem = std::int64_t{80} << 30;
  const auto allocation = [&](std::int64_t time, dlprof::MemoryDeviceType type, std::int32_t device, std::int64_t total) {
    dlprof::MemoryEvent event;
    event.time_ns = time;
    event.device_type = type;
    event.device = device;
    event.bytes = 1;
    event.total_allocated = total;
    trace.memory_events.push_back(event);
  };
  allocation(kMs, dlprof::MemoryDeviceType::CUDA, 0, std::int64_t{1} << 30);
  allocation(1'500'000, dlprof::MemoryDeviceType::CPU, -1, std::int64_t{10} << 20);
  allocation(2 * kMs, dlprof::MemoryDeviceType::CUDA, 0, std::int64_t{3} << 30);
  allocation(3 * kMs, dlprof::MemoryDeviceType::CUDA, 0, std::int64_t{2} << 30);
}

dlprof::Trace one_rank() {
  dlprof::Trace trace = one_rank_builder().trace();
  add_memory(trace);
  return trace;
}

// Ranks 0 and 1 of 2, rank 1's step 2 one ms longer (6 ms): step 2's slowest rank, 14.3% over the
// median (3.5 ms) and 33.3% over the fastest.
std::vector<dlprof::Trace> two_ranks() {
  std::vector<dlprof::Trace> ranks;
  ranks.push_back(one_rank_builder(6 * kMs).rank(1, 2).trace());
  ranks.push_back(one_rank_builder().rank(0, 2).trace());
  return ranks;
}

// two_ranks() with an all-reduce in each step 2: rank 1 computes 1 ms longer in a forward range
// and enters the all-reduce 1 ms after rank 0 (both leave at 3.5 ms).
std::vector<dlprof::Trace> two_ranks_with_collectives() {
  std::vector<dlprof::Trace> ranks;
  for (const std::int64_t rank : {1, 0}) {
    const bool late = rank == 1;
    const std::int64_t enter = late ? 3'200'000 : 2'200'000;
    dlprof::CollectiveCall call;
    call.name = "allreduce";
    call.backend = "gloo";
    call.dtype = "Float";
    call.in_nelems = call.out_nelems = 1 << 18;
    call.group_size = 2;
    call.rank = rank;
    call.group_name = "0";
    call.group_ranks = "[0, 1]";
    call.seq = 5;
    ranks.push_back(one_rank_builder(late ? 6 * kMs : 5 * kMs)
                        .rank(rank, 2)
                        .range("forward", 2'100'000, late ? 3'100'000 : 2'100'100, dlprof::Category::Forward)
                        .collective(call, enter, 3'500'000)
                        .range("gloo:all_reduce", enter + 1000, 3'499'000, dlprof::Category::Communication)
                        .trace());
  }
  return ranks;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream stream(text);
  for (std::string line; std::getline(stream, line);) lines.push_back(line);
  return lines;
}

// Benchmark's output tests: some line of the text matches the whole regex.
::testing::AssertionResult has_line(const std::string& text, const std::string& pattern) {
  const std::regex regex(pattern);
  for (const std::string& line : lines_of(text))
    if (std::regex_match(line, regex)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "no line matches /" << pattern << "/ in:\n" << text;
}

/// The text with its wrapped lines joined: what a paragraph says, wherever it breaks.
std::string unwrapped(std::string text) {
  std::replace(text.begin(), text.end(), '\n', ' ');
  std::string joined;
  for (const char c : text)
    if (c != ' ' || joined.empty() || joined.back() != ' ') joined.push_back(c);
  return joined;
}

std::size_t count_of(std::string_view text, std::string_view part) {
  std::size_t count = 0;
  for (std::size_t at = text.find(part); at != std::string_view::npos; at = text.find(part, at + 1)) ++count;
  return count;
}

// Every element of `html` closed in order (void elements excepted), script and style skipped
// whole, no '<' or '&' in text that does not start a tag, a comment or an entity.
::testing::AssertionResult well_formed(const std::string& html) {
  static const std::vector<std::string> kVoid = {"meta", "link", "br", "hr", "img", "input"};
  static const std::regex kEntity("^&(#[0-9]+|#x[0-9a-fA-F]+|[a-zA-Z]+);");
  std::vector<std::string> open;
  for (std::size_t i = 0; i < html.size(); ++i) {
    if (html[i] == '&') {
      if (!std::regex_search(html.substr(i, 12), kEntity))
        return ::testing::AssertionFailure() << "bare '&' at " << i << ": " << html.substr(i, 40);
      continue;
    }
    if (html[i] != '<') continue;
    if (html.compare(i, 4, "<!--") == 0 || html.compare(i, 9, "<!DOCTYPE") == 0) {
      i = html.find('>', i);
      continue;
    }
    const std::size_t end = html.find('>', i);
    if (end == std::string::npos) return ::testing::AssertionFailure() << "unclosed tag at " << i;
    const bool closing = html[i + 1] == '/';
    const std::size_t name_start = i + (closing ? 2 : 1);
    std::size_t name_end = name_start;
    while (name_end < end && (std::isalnum(static_cast<unsigned char>(html[name_end])) != 0)) ++name_end;
    const std::string name = html.substr(name_start, name_end - name_start);
    if (name.empty()) return ::testing::AssertionFailure() << "unescaped '<' at " << i << ": " << html.substr(i, 40);
    if (closing) {
      if (open.empty() || open.back() != name)
        return ::testing::AssertionFailure() << "</" << name << "> at " << i << " closes <" << (open.empty() ? "" : open.back()) << ">";
      open.pop_back();
    } else if (name == "script" || name == "style") {
      const std::size_t close = html.find("</" + name + ">", end);
      if (close == std::string::npos) return ::testing::AssertionFailure() << "<" << name << "> never closed";
      i = close + name.size() + 2;
      continue;
    } else if (html[end - 1] != '/' && std::find(kVoid.begin(), kVoid.end(), name) == kVoid.end()) {
      open.push_back(name);
    }
    i = end;
  }
  if (!open.empty()) return ::testing::AssertionFailure() << "<" << open.back() << "> never closed";
  return ::testing::AssertionSuccess();
}

// Nothing the page would fetch: no URL but the SVG namespace.
::testing::AssertionResult self_contained(const std::string& html) {
  std::string rest = html;
  for (std::size_t at; (at = rest.find("xmlns=\"http://www.w3.org/2000/svg\"")) != std::string::npos;) rest.erase(at, 34);
  for (const std::string_view reference : {"http:", "https:", "src=", "url(", "@import", "//cdn"})
    if (rest.find(reference) != std::string::npos)
      return ::testing::AssertionFailure() << "the page refers to something outside it: " << reference;
  return ::testing::AssertionSuccess();
}

TEST(ReportTextTest, StepBreakdownPerStepAverageAndShares) {
  const std::string text = dlprof::render_text(dlprof::make_report(one_rank()));
  EXPECT_TRUE(has_line(text, "== Rank 0 =+"));
  EXPECT_TRUE(has_line(text, R"(Step time breakdown \(ms\), TensorBoard's roles by priority)"));
  EXPECT_TRUE(has_line(text, R"(  Step +Total +Kernel +Runtime +DataLoader +CPU Exec +Other)"));
  EXPECT_TRUE(has_line(text, R"(  ProfilerStep#1 +2\.000 +0\.600 +0\.010 +0\.900 +0\.190 +0\.300)"));
  EXPECT_TRUE(has_line(text, R"(  ProfilerStep#2 +3\.000 +1\.900 +0\.020 +0\.000 +0\.000 +1\.080)"));
  EXPECT_TRUE(has_line(text, R"(  Average of 2 +2\.500 +1\.250 +0\.015 +0\.450 +0\.095 +0\.690)"));
  EXPECT_TRUE(has_line(text, R"(  Share of the average +100\.0% +50\.0% +0\.6% +18\.0% +3\.8% +27\.6%)"));
}

TEST(ReportTextTest, GpuSummaryAndHtaBreakdowns) {
  const std::string text = dlprof::render_text(dlprof::make_report(one_rank()));
  EXPECT_TRUE(has_line(text, R"(GPU summary over the steps \(TensorBoard; TC: dlprof's share of kernel time on Tensor Cores\))"));
  EXPECT_TRUE(has_line(text, R"(  GPU +Name +Utilization +Est\. SM efficiency +Est\. occupancy +TC \(dlprof\) +Kernels \(ms\))"));
  EXPECT_TRUE(has_line(text, R"(  0 +A100 \(sm_80\) +50\.0% +unknown +0\.0% +0\.0% +2\.500)"));
  EXPECT_TRUE(has_line(text, R"(GPU time \(HTA temporal breakdown\))"));
  EXPECT_TRUE(has_line(text, R"(  idle +0\.400 +13\.8%)"));
  EXPECT_TRUE(has_line(text, R"(  compute +0\.700 +24\.1%)"));
  EXPECT_TRUE(has_line(text, R"(  non-compute +1\.800 +62\.1%)"));
  EXPECT_TRUE(has_line(text, R"(  kernel time +2\.900 +100\.0%)"));
  EXPECT_TRUE(has_line(text, R"(  COMMUNICATION +1\.800 +72\.0%)"));
  EXPECT_TRUE(has_line(text, R"(  COMPUTATION +0\.700 +28\.0%)"));
  EXPECT_TRUE(has_line(text, R"(  3 launches; launch call 10\.000 us on average; .*)"));
}

TEST(ReportTextTest, TopOpsKernelsAndNvprofRows) {
  const std::string text = dlprof::render_text(dlprof::make_report(one_rank()));
  EXPECT_TRUE(has_line(text, R"(Top ops and ranges by self CPU time \(2 of 2\))"));  // steps are not ops
  // No GPU work tied to the loader: a dash, not 0ns.
  EXPECT_TRUE(has_line(text, R"(  enumerate\(DataLoader\)#Loader\.__next__ +DataLoader +1 +900\.000us +900\.000us +– +–)"));
  // The GPU busy half of the steps: the ops by GPU time come first; only aten::mm has any.
  EXPECT_TRUE(has_line(text, R"(Top ops and ranges by self GPU time \(1 of 2\))"));
  EXPECT_LT(text.find("by self GPU time"), text.find("by self CPU time"));
  EXPECT_TRUE(has_line(text, R"(  aten::mm +User +1 +500\.000us +500\.000us +600\.000us +600\.000us)"));
  EXPECT_TRUE(has_line(text, R"(Top kernels by GPU time \(3 of 3, 2\.500 ms in all\))"));
  // Short names: the function without its parameters, its first template argument that is not a
  // number; long ones cut in the middle to the column's 48 characters.
  EXPECT_TRUE(has_line(text, R"(  ncclKernel_AllReduce_RING_LL_Sum_float +COMMUNICATION +- +1 +1\.800ms .* 72\.0%)"));
  EXPECT_TRUE(has_line(text, R"(  gemm<float> +COMPUTATION +- +1 +600\.000us .* 24\.0%)"));
  EXPECT_TRUE(has_line(text, R"(  long_kernel<a{18}\.\.\.a{14}> +COMPUTATION .* 4\.0%)"));
  // nvprof's summary shows no kernel: the table above does.
  EXPECT_FALSE(has_line(text, R"(  GPU activities .*)"));
  EXPECT_TRUE(has_line(text, R"(  API calls +100\.0% +30\.000us +3 +10\.000us +10\.000us +10\.000us +cudaLaunchKernel)"));
  EXPECT_TRUE(has_line(text, R"(Peak memory allocated:  CPU 10\.00 MiB  CUDA:0 3\.00 GiB of 80\.00 GiB \(3\.8%\))"));
}

TEST(ReportTest, WhereTheHostWaitsForTheGpuInTextJsonAndHtml) {
  // dlprof_test::steps_reading_a_scalar: 4 reads of 7.199 ms each in aten::item from model.py(143),
  // the GPU idle 0.75 ms after each.
  const dlprof::Report report = dlprof::make_report(dlprof_test::steps_reading_a_scalar());
  const std::string text = dlprof::render_text(report);
  EXPECT_TRUE(has_line(text, R"(Where the host waits for the GPU: 4 synchronisation points in the steps, 28\.796ms of waiting)"));
  EXPECT_TRUE(has_line(text, R"(  scalar read +4 +28\.796ms +3\.000ms +3\.000ms +aten::item +model\.py\(143\): forward)"));
  for (const std::string& line : lines_of(text)) EXPECT_LE(dlprof::detail::text_width(line), 120u) << line;

  const Json json = Json::parse(dlprof::render_json(report));
  const Json& syncs = json.at("ranks").at(0).at("host_syncs");
  EXPECT_EQ(syncs.at("points"), 4);
  EXPECT_DOUBLE_EQ(syncs.at("wait_us").get<double>(), 28'796.0);
  EXPECT_DOUBLE_EQ(syncs.at("saving_us").get<double>(), 3'000.0);
  ASSERT_EQ(syncs.at("sites").size(), 1u);
  const Json& site = syncs.at("sites").at(0);
  EXPECT_EQ(site.at("kind"), "scalar_read");
  EXPECT_EQ(site.at("op"), "aten::item");
  EXPECT_EQ(site.at("frame"), "model.py(143): forward");
  EXPECT_TRUE(site.at("range").is_null());
  EXPECT_EQ(site.at("call"), "cudaMemcpyAsync");
  EXPECT_EQ(site.at("count"), 4);
  EXPECT_DOUBLE_EQ(site.at("gpu_idle_after_us").get<double>(), 3'000.0);
  EXPECT_DOUBLE_EQ(site.at("longest_wait_us").get<double>(), 7'149.0);
  EXPECT_EQ(site.at("longest_wait_bytes"), 4);
  // The finding comes first: 0.75 ms of each 10 ms step.
  EXPECT_EQ(json.at("recommendations").at(0).at("id"), "scalar_read_syncs");

  const std::string html = dlprof::render_html(report);
  EXPECT_THAT(html, HasSubstr("Where the host waits for the GPU (4 synchronisation points in the steps, 28.796ms of waiting)"));
  EXPECT_THAT(html, HasSubstr("<td class=\"name\">model.py(143): forward</td>"));
}

// torch's memory columns in the ops tables of every format, and the ops that kept the most GPU
// memory: one_rank()'s aten::mm [1 ms, 1.5 ms] holds a GPU allocation at its start and a CPU one
// at its end, 1 byte each.
TEST(ReportTest, OpsCarryTorchsMemoryColumnsInEachFormat) {
  const dlprof::Report report = dlprof::make_report(one_rank());
  const dlprof::RankReport& rank = report.ranks.at(0);
  ASSERT_TRUE(rank.memory_activity);
  ASSERT_TRUE(rank.device_memory_activity);
  const auto mm = std::find_if(rank.top_ops.begin(), rank.top_ops.end(), [](const dlprof::KeyAverage& op) { return op.name == "aten::mm"; });
  ASSERT_NE(mm, rank.top_ops.end());
  EXPECT_EQ(mm->memory.cpu_bytes, 1);
  EXPECT_EQ(mm->memory.device_bytes, 1);
  ASSERT_FALSE(rank.top_ops_by_memory.empty());
  for (const dlprof::KeyAverage& op : rank.top_ops_by_memory) EXPECT_GT(op.memory.self_device_bytes, 0) << op.name;

  const std::string text = dlprof::render_text(report);
  EXPECT_THAT(text, HasSubstr("Self CUDA Mem"));
  EXPECT_THAT(text, HasSubstr("Top ops and ranges by the CUDA memory they allocated less what they released, self"));
  EXPECT_THAT(dlprof::render_html(report), HasSubstr(">Self CUDA Mem</th>"));
  const Json json = Json::parse(dlprof::render_json(report));
  const Json& json_rank = json.at("ranks").at(0);
  EXPECT_EQ(json_rank.at("device_memory_name"), "CUDA");
  bool found = false;
  for (const Json& op : json_rank.at("top_ops")) {
    if (op.at("name") != "aten::mm") continue;
    found = true;
    EXPECT_EQ(op.at("memory").at("cpu_bytes"), 1);
    EXPECT_EQ(op.at("memory").at("device_bytes"), 1);
    EXPECT_EQ(op.at("memory_on_thread").at("self_device_bytes"), 1);
  }
  EXPECT_TRUE(found);
  EXPECT_FALSE(json_rank.at("top_ops_by_memory").empty());
  // TensorBoard's memory view, per device: aten::mm's CPU byte is its own; the GPU's at 1 ms too.
  EXPECT_THAT(text, HasSubstr("Memory by op on CPU (1 op allocated or released memory; TensorBoard's memory view)"));
  EXPECT_THAT(text, HasSubstr("Memory by op on CUDA:0"));
  ASSERT_EQ(json_rank.at("memory_by_op").size(), 2u);
  EXPECT_EQ(json_rank.at("memory_by_op").at(0).at("device_type"), "CPU");
  EXPECT_EQ(json_rank.at("memory_by_op").at(0).at("ops").at(0).at("name"), "aten::mm");
  EXPECT_EQ(json_rank.at("memory_by_op").at(0).at("ops").at(0).at("self_allocated_bytes"), 1);

  const dlprof::Report without = dlprof::make_report(one_rank_builder().trace());
  EXPECT_THAT(dlprof::render_text(without), Not(HasSubstr("CPU Mem")));
  const Json without_json = Json::parse(dlprof::render_json(without));
  EXPECT_TRUE(without_json.at("ranks").at(0).at("device_memory_name").is_null());
  EXPECT_TRUE(without_json.at("ranks").at(0).at("top_ops").at(0).at("memory").is_null());
  EXPECT_TRUE(without_json.at("ranks").at(0).at("top_ops_by_memory").empty());
  EXPECT_TRUE(without_json.at("ranks").at(0).at("memory_by_op").empty());
}

// Six steps on one GPU: aten::cat in nn.Module: History keeps 2 KiB each step (ns: step s is
// [s ms, s ms + 0.9 ms], the allocation at + 0.2 ms), over 1 GiB allocated before the window; a
// temporary of 1 MiB in each step comes and goes inside aten::mm.
dlprof::Trace steps_keeping_history() {
  dlprof_test::AnalysisTraceBuilder builder;
  builder.device(0, "A100", 8);
  std::int64_t total = std::int64_t{1} << 30;
  for (int s = 0; s < 6; ++s) {
    const std::int64_t start = s * kMs;
    builder.step(s, start, start + 900'000)
        .range("nn.Module: History", start + 100'000, start + 300'000, dlprof::Category::Forward)
        .op("aten::cat", start + 150'000, start + 250'000)
        .op("aten::mm", start + 400'000, start + 600'000);
    total += 2048;
    builder.memory(start + 200'000, 0x7000 + static_cast<std::uint64_t>(s), 2048, total, 0, dlprof::MemoryDeviceType::CUDA, 0);
    builder.memory(start + 450'000, 0x9000, std::int64_t{1} << 20, total + (std::int64_t{1} << 20), 0, dlprof::MemoryDeviceType::CUDA, 0);
    builder.memory(start + 550'000, 0x9000, -(std::int64_t{1} << 20), total, 0, dlprof::MemoryDeviceType::CUDA, 0);
  }
  return builder.trace();
}

// Each device's peak explained, the memory at the steps' ends and what grows, and the timeline by
// category, in every format.
TEST(ReportTest, ThePeakExplainedAndALeakNamedInEachFormat) {
  const dlprof::Report report = dlprof::make_report(steps_keeping_history());
  const std::string text = dlprof::render_text(report);
  EXPECT_THAT(text, HasSubstr("Memory at its peak on CUDA:0: what was alive, by the op that allocated it"));
  // The peak: in the last step's aten::mm, 1 GiB + 6 x 2 KiB + 1 MiB.
  EXPECT_THAT(text, HasSubstr("CUDA:0: peak 1.00 GiB allocated in ProfilerStep#5 (aten::mm)."));
  EXPECT_THAT(unwrapped(text), HasSubstr("By category: unknown 1.00 GiB (99.9%), temporaries 1.00 MiB (0.1%), activations 12.00 KiB (0.0%)"));
  EXPECT_TRUE(has_line(text, R"(  aten::mm +1\.00 MiB +1)"));
  EXPECT_TRUE(has_line(text, R"(  aten::cat in nn\.Module: History +12\.00 KiB +6)"));
  EXPECT_THAT(text, HasSubstr("The largest allocations alive at the peak on CUDA:0"));
  EXPECT_THAT(text, HasSubstr("Memory growth over 6 steps"));
  EXPECT_TRUE(has_line(text, R"(  CUDA:0 +aten::cat in nn\.Module: History +activations +8\.00 KiB +4 +4 of 4 +\+2\.00 KiB/step)"));

  const Json json = Json::parse(dlprof::render_json(report));
  const Json& rank = json.at("ranks").at(0);
  ASSERT_EQ(rank.at("memory_peaks").size(), 1u);
  const Json& peak = rank.at("memory_peaks").at(0);
  EXPECT_EQ(peak.at("device_type"), "CUDA");
  EXPECT_EQ(peak.at("allocated_bytes"), (std::int64_t{1} << 30) + 6 * 2048 + (std::int64_t{1} << 20));
  EXPECT_EQ(peak.at("step"), "ProfilerStep#5");
  EXPECT_TRUE(peak.at("phase").is_null());
  EXPECT_EQ(peak.at("by_category").at("temporaries"), std::int64_t{1} << 20);
  EXPECT_EQ(peak.at("by_category").at("unknown"), std::int64_t{1} << 30);
  EXPECT_EQ(peak.at("by_category").at("activations"), 6 * 2048);  // made in a module, alive at the window's end
  EXPECT_EQ(peak.at("unseen_bytes"), std::int64_t{1} << 30);
  EXPECT_EQ(peak.at("largest").at(0).at("bytes"), std::int64_t{1} << 20);
  const Json& growth = rank.at("memory_growth");
  EXPECT_EQ(growth.at("steps"), 6);
  EXPECT_TRUE(growth.at("not_judged").is_null());
  EXPECT_EQ(growth.at("leak"), true);
  EXPECT_EQ(growth.at("devices").at(0).at("bytes_per_step"), 2048.0);
  EXPECT_EQ(growth.at("devices").at(0).at("holders").at(0).at("site"), "aten::cat in nn.Module: History");
  EXPECT_EQ(growth.at("devices").at(0).at("holders").at(0).at("bytes_per_step"), 2048.0);
  const Json& timeline = rank.at("memory_timeline").at(0);
  EXPECT_EQ(timeline.at("categories").at(4), "temporaries");
  EXPECT_EQ(timeline.at("points").size(), 18u);

  const std::string html = dlprof::render_html(report);
  EXPECT_TRUE(well_formed(html));
  EXPECT_THAT(html, HasSubstr("<svg class=\"chart\" id=\"rank-0-memory-cuda0\""));
  EXPECT_THAT(html, HasSubstr("<h3>Memory growth over 6 steps</h3>"));
  EXPECT_THAT(html, HasSubstr("<td>aten::cat in nn.Module: History</td>"));

  // Without allocations: no such sections, and empty JSON.
  const dlprof::Report without = dlprof::make_report(one_rank_builder().trace());
  EXPECT_THAT(dlprof::render_text(without), Not(HasSubstr("Memory growth")));
  const Json without_json = Json::parse(dlprof::render_json(without));
  EXPECT_TRUE(without_json.at("ranks").at(0).at("memory_peaks").empty());
  EXPECT_TRUE(without_json.at("ranks").at(0).at("memory_growth").at("devices").empty());
  EXPECT_TRUE(without_json.at("ranks").at(0).at("memory_timeline").empty());
}

// An out-of-memory report leads the rank's section, with what held the memory then, in every
// format.
TEST(ReportTest, AnOutOfMemoryErrorLeadsTheRanksSection) {
  dlprof::Trace trace = steps_keeping_history();
  // In step 4's aten::mm, asking 2 GiB: 1 GiB before the window, 5 x 2 KiB kept, the 1 MiB temporary.
  trace.out_of_memory.push_back(dlprof::OutOfMemoryEvent{4 * kMs + 500'000, std::int64_t{2} << 30,
                                                         (std::int64_t{1} << 30) + 5 * 2048 + (std::int64_t{1} << 20), 0,
                                                         dlprof::MemoryDeviceType::CUDA, 0, 0});
  const dlprof::Report report = dlprof::make_report(trace);
  const std::string text = unwrapped(dlprof::render_text(report));
  const std::size_t line = text.find("Out of memory in ProfilerStep#4 (aten::mm), asking 2.00 GiB on CUDA:0: 1.00 GiB allocated, of "
                                     "which unknown 1.00 GiB (99.9%), temporaries 1.00 MiB (0.1%)");
  ASSERT_NE(line, std::string::npos) << text.substr(0, 3000);
  EXPECT_LT(line, text.find("Step time breakdown"));
  EXPECT_NE(text.find("held most by aten::mm (1.00 MiB), aten::cat in nn.Module: History (10.00 KiB).", line), std::string::npos);
  const Json json = Json::parse(dlprof::render_json(report));
  const Json& failure = json.at("ranks").at(0).at("out_of_memory").at(0);
  EXPECT_EQ(failure.at("requested_bytes"), std::int64_t{2} << 30);
  EXPECT_EQ(failure.at("site"), "aten::mm");
  EXPECT_EQ(failure.at("step"), "ProfilerStep#4");
  EXPECT_EQ(failure.at("by_category").at("temporaries"), std::int64_t{1} << 20);
  EXPECT_THAT(dlprof::render_html(report), HasSubstr("<p class=\"alert\">Out of memory in ProfilerStep#4"));
  EXPECT_TRUE(Json::parse(dlprof::render_json(dlprof::make_report(steps_keeping_history()))).at("ranks").at(0).at("out_of_memory").empty());
}

TEST(ReportTest, ATraceWithoutSynchronisationsHasNoSuchSection) {
  const dlprof::Report report = dlprof::make_report(one_rank());
  EXPECT_THAT(dlprof::render_text(report), Not(HasSubstr("Where the host waits")));
  EXPECT_EQ(Json::parse(dlprof::render_json(report)).at("ranks").at(0).at("host_syncs").at("points"), 0);
}

TEST(ReportTextTest, RecommendationsWithTheirEvidence) {
  const dlprof::Report report = dlprof::make_report(one_rank());
  ASSERT_FALSE(report.recommendations.empty());
  const std::string text = dlprof::render_text(report);
  EXPECT_TRUE(has_line(text, "== Recommendations =+"));
  // The NCCL kernel's 1.8 ms, unhidden, over 2 steps; DataLoader 0.45 ms of the 2.5 ms median step.
  EXPECT_TRUE(has_line(text, R"(1\. \[≈ 0\.900 ms/step, 36\.0%\] Only 0\.0% of communication overlaps computation.*)"));
  EXPECT_TRUE(has_line(text, R"(2\. \[≈ 0\.450 ms/step, 18\.0%\] 18\.0% of the step is DataLoader.*)"));
  EXPECT_THAT(text, HasSubstr("[dataloader_bound]"));
  for (const auto& advice : report.recommendations) EXPECT_THAT(text, HasSubstr(advice.evidence.substr(0, 30)));
}

TEST(ReportTextTest, LinesFitAHundredAndTwentyColumns) {
  for (const std::string& text : {dlprof::render_text(dlprof::make_report(one_rank())),
                                  dlprof::render_text(dlprof::make_report(two_ranks()))})
    for (const std::string& line : lines_of(text)) EXPECT_LE(dlprof::detail::text_width(line), 120u) << line;
}

TEST(ReportTextTest, RanksComparedAndStragglers) {
  const std::string text = dlprof::render_text(dlprof::make_report(two_ranks()));
  EXPECT_TRUE(has_line(text, "2 ranks; HTA's analyses over every complete step, in exact ns"));
  EXPECT_TRUE(has_line(text, "== Rank 0 of 2 =+"));
  EXPECT_TRUE(has_line(text, "== Rank 1 of 2 =+"));
  EXPECT_LT(text.find("== Rank 0 of 2"), text.find("== Rank 1 of 2"));  // by rank, whatever the input order
  EXPECT_TRUE(has_line(text, "== Ranks compared =+"));
  EXPECT_TRUE(has_line(text, R"( +0 +2 +2\.500 +2\.000 +3\.000 +50\.0% +13\.8% +24\.1% +62\.1% +0\.0%)"));
  EXPECT_TRUE(has_line(text, R"( +1 +2 +3\.000 +2\.000 +4\.000 .*)"));
  EXPECT_TRUE(has_line(text, "Step times across ranks: the slowest and the fastest rank of each step .*"));
  EXPECT_TRUE(has_line(text, R"( +2 +2 +1 +4\.000 +3\.500 +0 +3\.000 +\+14\.3% +\+33\.3%)"));
}

TEST(ReportTest, CollectivesAcrossRanksNameTheRankThatArrivesLast) {
  const dlprof::Report report = dlprof::make_report(two_ranks_with_collectives());
  ASSERT_TRUE(report.collectives.has_value());
  const std::string text = dlprof::render_text(report);
  EXPECT_THAT(text, HasSubstr("== Collectives across ranks"));
  // Latency 0.3 ms per call; rank 0 waits 1 ms for rank 1, rank 1 none: 0.5 ms per call of a rank.
  EXPECT_TRUE(has_line(text, R"(\s+allreduce\s+1\s+1\.00 MiB\s+0\.300\s+3\.495\s+3\.495\s+0\.500\s+1\.000)"));
  EXPECT_TRUE(has_line(text, R"(Straggler: rank 1, last to arrive at 1 of 1 collectives, 1\.000 ms after the first rank.*)"));
  EXPECT_THAT(text, HasSubstr("Rank 1 arrives last at 1 of 1 collectives"));
  for (const std::string& line : lines_of(text)) EXPECT_LE(dlprof::detail::text_width(line), 120u) << line;
  const Json json = Json::parse(dlprof::render_json(report));
  const Json& collectives = json.at("collectives");
  EXPECT_EQ(collectives.at("straggler").at("rank"), 1);
  EXPECT_EQ(collectives.at("straggler").at("phase"), "forward");
  ASSERT_EQ(collectives.at("ranks").size(), 2u);
  EXPECT_DOUBLE_EQ(collectives.at("ranks")[0].at("waiting_us").get<double>(), 1000.0 / 2) << "1 ms in one of two steps";
  EXPECT_EQ(collectives.at("instances")[0].at("last_rank"), 1);
  const std::string html = dlprof::render_html(report);
  EXPECT_TRUE(well_formed(html));
  EXPECT_THAT(html, HasSubstr("<section id=\"collectives\">"));
  EXPECT_THAT(html, HasSubstr("id=\"collectives-ranks\""));
}

// Traces that name no collective: the NCCL kernels are compared across the ranks, with no sizes
// (and so no bandwidths) to show; the straggler is the rank that arrives last.
TEST(ReportTest, CollectivesOfKernelsAloneAreComparedWithoutSizes) {
  const dlprof::Report report = dlprof::make_report(dlprof_test::ranks_waiting_for_a_late_rank());
  ASSERT_TRUE(report.collectives.has_value());
  const std::string text = dlprof::render_text(report);
  // Latency 10 us; waits of 7.3, 6.5, 5.2 and 0 ms: 4.75 ms per call of a rank; skew 7.3 ms.
  EXPECT_TRUE(has_line(text, R"(\s+sendrecv\s+2\s+-\s+0\.010\s+-\s+-\s+4\.750\s+7\.300)"));
  EXPECT_THAT(unwrapped(text), HasSubstr("Straggler: rank 3, last to arrive at 2 of 2 collectives, 7.300 ms after the first "
                                         "rank on average: the others wait 7.300 ms per step for it; no annotated phase"));
  const Json json = Json::parse(dlprof::render_json(report));
  const Json& type = json.at("collectives").at("types").at(0);
  EXPECT_EQ(type.at("bytes"), 0);
  EXPECT_TRUE(type.at("algbw_gbps").is_null());
  EXPECT_TRUE(type.at("busbw_gbps").is_null());
  EXPECT_DOUBLE_EQ(type.at("latency_us").get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(type.at("mean_waiting_us").get<double>(), 4750.0);
  const Json& straggler = json.at("collectives").at("straggler");
  EXPECT_EQ(straggler.at("rank"), 3);
  EXPECT_TRUE(straggler.at("phase").is_null());
  EXPECT_DOUBLE_EQ(straggler.at("held_back_us").get<double>(), 7300.0);
  EXPECT_DOUBLE_EQ(json.at("collectives").at("ranks").at(0).at("transfer_us").get<double>(), 10.0);
  const std::string html = dlprof::render_html(report);
  EXPECT_TRUE(well_formed(html));
  EXPECT_THAT(html, HasSubstr("Straggler: rank 3, last to arrive at 2 of 2 collectives"));
}

// NCCL's kernel runs beside a GEMM: the step table gives the time to the GEMM (TensorBoard's
// roles), HTA's kernel types count it as communication. The page and the text say why the two differ.
TEST(ReportTest, TheStepTableSaysWhyItsCommunicationIsNotHtas) {
  const dlprof::Trace overlapped = dlprof_test::AnalysisTraceBuilder()
                                       .step(1, 0, 1'000'000)
                                       .call("cudaLaunchKernel", 10'000, 20'000, 1)
                                       .kernel("sm80_xmma_gemm_bf16bf16_bf16f32", 100'000, 900'000, 1, 0, 7)
                                       .call("cudaLaunchKernel", 30'000, 40'000, 2)
                                       .kernel(dlprof_test::kNcclAllReduce, 150'000, 850'000, 2, 0, 21)
                                       .trace();
  const dlprof::Report report = dlprof::make_report(overlapped);
  const std::string expected =
      "Communication is 0.0% of the step above: its time where nothing else runs on the GPU (the roles claim time in "
      "order, kernels first) and only for the communication of nccl:* or gloo:* ops. Communication kernels take 87.5% "
      "of the GPU's kernel time (HTA's kernel types), 100.0% of it beside computation.";
  EXPECT_THAT(unwrapped(dlprof::render_text(report)), HasSubstr(expected));
  std::string escaped = expected;
  escaped.replace(escaped.find("GPU's"), 5, "GPU&#39;s");
  escaped.replace(escaped.find("HTA's"), 5, "HTA&#39;s");
  EXPECT_THAT(dlprof::render_html(report), HasSubstr(escaped));

  const dlprof::Trace alone = dlprof_test::AnalysisTraceBuilder()
                                  .step(1, 0, 1'000'000)
                                  .call("cudaLaunchKernel", 10'000, 20'000, 1)
                                  .kernel("sm80_xmma_gemm_bf16bf16_bf16f32", 100'000, 900'000, 1, 0, 7)
                                  .trace();
  EXPECT_THAT(dlprof::render_text(dlprof::make_report(alone)), Not(HasSubstr("Communication is")));
}

// A report over many ranks keeps each rank's analyses, not its trace: made from analyse_rank()'s
// summaries, in any order, it is the report of the traces themselves.
TEST(ReportTest, AReportFromAnalysedRanksIsTheReportOfTheirTraces) {
  const std::vector<dlprof::Trace> traces = two_ranks_with_collectives();
  const dlprof::Report of_traces = dlprof::make_report(traces);
  std::vector<dlprof::AnalysedRank> analysed;
  for (auto trace = traces.rbegin(); trace != traces.rend(); ++trace) analysed.push_back(dlprof::analyse_rank(dlprof::Trace(*trace)));
  for (const dlprof::AnalysedRank& rank : analysed) {
    ASSERT_NE(rank.trace, nullptr);
    EXPECT_TRUE(rank.trace->events.empty() && rank.trace->gpu_events.empty() && rank.trace->api_events.empty() &&
                rank.trace->collectives.empty())
        << "its events are released";
    EXPECT_FALSE(rank.trace->names.empty()) << "the report's views point into its names";
    EXPECT_TRUE(rank.has_collectives);
  }
  const dlprof::Report of_analysed = dlprof::make_report(std::move(analysed));
  ASSERT_TRUE(of_analysed.collectives.has_value());
  EXPECT_EQ(dlprof::render_json(of_analysed), dlprof::render_json(of_traces));
  EXPECT_EQ(dlprof::render_text(of_analysed), dlprof::render_text(of_traces));
  EXPECT_EQ(dlprof::render_html(of_analysed), dlprof::render_html(of_traces));
}

TEST(ReportTextTest, FormatterProfilerAndEmptyInput) {
  const dlprof::Report report = dlprof::make_report(one_rank());  // keeps the temporary trace
  EXPECT_EQ(fmt::format("{}", report), dlprof::render_text(report));
  EXPECT_EQ(dlprof::report(one_rank()), dlprof::render_text(report));
  EXPECT_THAT(dlprof::render_text(dlprof::make_report(std::vector<dlprof::Trace>{})), HasSubstr("No trace to report on."));
  const dlprof::Report of_two = dlprof::make_report(two_ranks());
  EXPECT_TRUE(has_line(dlprof::render_text(of_two), R"(  ProfilerStep#1 +2\.000 .*)"));

  // A CPU-only trace: no GPU sections.
  const std::string cpu_only = dlprof::report(
      dlprof_test::AnalysisTraceBuilder().step(1, 0, kMs).range("forward", 100, 900'000, dlprof::Category::Forward).trace());
  EXPECT_TRUE(has_line(cpu_only, R"(  ProfilerStep#1 +1\.000 +0\.900 +0\.100)"));
  EXPECT_THAT(cpu_only, HasSubstr("No GPU activity in this trace"));
  EXPECT_THAT(cpu_only, Not(HasSubstr("HTA temporal breakdown")));
}

TEST(ReportJsonTest, RequiredKeysAndValues) {
  const Json json = Json::parse(dlprof::render_json(dlprof::make_report(one_rank())));
  EXPECT_EQ(json["hta_compat"], false);
  ASSERT_EQ(json["ranks"].size(), 1u);
  const Json& rank = json["ranks"][0];
  EXPECT_EQ(rank["rank"], 0);
  const Json& temporal = rank["temporal_breakdown"];
  EXPECT_DOUBLE_EQ(temporal["idle_us"].get<double>(), 400.0);
  EXPECT_DOUBLE_EQ(temporal["compute_us"].get<double>(), 700.0);
  EXPECT_DOUBLE_EQ(temporal["non_compute_us"].get<double>(), 1800.0);
  EXPECT_DOUBLE_EQ(temporal["kernel_time_us"].get<double>(), 2900.0);
  EXPECT_DOUBLE_EQ(temporal["idle_pct"].get<double>(), 100.0 * 0.4 / 2.9);
  EXPECT_DOUBLE_EQ(temporal["compute_pct"].get<double>(), 100.0 * 0.7 / 2.9);
  EXPECT_DOUBLE_EQ(temporal["non_compute_pct"].get<double>(), 100.0 * 1.8 / 2.9);

  const Json& types = rank["kernel_type_breakdown"];
  ASSERT_EQ(types.size(), 2u);
  EXPECT_EQ(types[0]["type"], "COMMUNICATION");
  EXPECT_DOUBLE_EQ(types[0]["time_us"].get<double>(), 1800.0);
  EXPECT_DOUBLE_EQ(types[0]["pct"].get<double>(), 72.0);
  EXPECT_EQ(types[1]["type"], "COMPUTATION");
  EXPECT_DOUBLE_EQ(types[1]["time_us"].get<double>(), 700.0);

  const Json& steps = rank["step_breakdown"];
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[0]["step"], "ProfilerStep#1");
  EXPECT_EQ(steps[0]["number"], 1);
  EXPECT_DOUBLE_EQ(steps[0]["start_us"].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(steps[0]["total_us"].get<double>(), 2000.0);
  EXPECT_DOUBLE_EQ(steps[0]["kernel_us"].get<double>(), 600.0);
  EXPECT_DOUBLE_EQ(steps[0]["runtime_us"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(steps[0]["dataloader_us"].get<double>(), 900.0);
  EXPECT_DOUBLE_EQ(steps[0]["cpu_exec_us"].get<double>(), 190.0);
  EXPECT_DOUBLE_EQ(steps[0]["other_us"].get<double>(), 300.0);
  EXPECT_DOUBLE_EQ(steps[1]["start_us"].get<double>(), 2000.0);
  EXPECT_DOUBLE_EQ(steps[1]["other_us"].get<double>(), 1080.0);
  EXPECT_DOUBLE_EQ(rank["average_step"]["total_us"].get<double>(), 2500.0);
  EXPECT_DOUBLE_EQ(rank["average_step"]["dataloader_pct"].get<double>(), 18.0);
  EXPECT_DOUBLE_EQ(rank["gpu_utilization"].get<double>(), 50.0);
  ASSERT_EQ(rank["gpus"].size(), 1u);
  EXPECT_EQ(rank["gpus"][0]["name"], "A100");
  EXPECT_EQ(rank["gpus"][0]["compute_capability"], "8.0");
  EXPECT_TRUE(rank["gpus"][0]["sm_efficiency_pct"].is_null());
  EXPECT_DOUBLE_EQ(rank["gpus"][0]["dlprof_tensor_core_pct"].get<double>(), 0.0);

  EXPECT_EQ(rank["top_kernels"][1]["name"], kGemm);  // escaped and read back whole
  EXPECT_EQ(rank["top_kernels"][2]["name"], kLongKernel);
  EXPECT_EQ(rank["top_ops"][1]["name"], "aten::mm");
  EXPECT_DOUBLE_EQ(rank["top_ops"][1]["self_gpu_us"].get<double>(), 600.0);
  EXPECT_EQ(rank["api_calls"][0]["calls"], 3);
  ASSERT_EQ(rank["memory"].size(), 2u);
  EXPECT_EQ(rank["memory"][1]["device"], "CUDA:0");
  EXPECT_EQ(rank["memory"][1]["peak_allocated_bytes"], std::int64_t{3} << 30);
  EXPECT_TRUE(json["rank_comparison"].is_null());

  ASSERT_FALSE(json["recommendations"].empty());
  for (const Json& advice : json["recommendations"]) {
    EXPECT_FALSE(advice["text"].get<std::string>().empty());
    EXPECT_FALSE(advice["evidence"].get<std::string>().empty());
    EXPECT_FALSE(advice["action"].get<std::string>().empty());
    EXPECT_EQ(advice["ranks"], Json::array({0}));
    EXPECT_EQ(advice["worst_rank"], 0);
  }
  const Json& loader = json["recommendations"][1];
  EXPECT_EQ(loader["id"], "dataloader_bound");
  EXPECT_DOUBLE_EQ(loader["impact_us"].get<double>(), 450.0);
  EXPECT_DOUBLE_EQ(loader["share_pct"].get<double>(), 18.0);
  EXPECT_EQ(loader["severity"], "high");
  const Json& verdict = json["verdict"];
  EXPECT_EQ(verdict["bound"], "gpu_compute");
  EXPECT_DOUBLE_EQ(verdict["bound_pct"].get<double>(), 50.0);
  EXPECT_EQ(verdict["steps"], 2);
  EXPECT_DOUBLE_EQ(verdict["median_step_us"].get<double>(), 2500.0);
  EXPECT_DOUBLE_EQ(verdict["mean_step_us"].get<double>(), 2500.0);
  EXPECT_DOUBLE_EQ(verdict["gpu_busy_pct"].get<double>(), 50.0);
  ASSERT_FALSE(verdict["top_actions"].empty());
  EXPECT_EQ(verdict["top_actions"][0]["id"], "low_comm_overlap");
  EXPECT_DOUBLE_EQ(verdict["top_actions"][0]["impact_us"].get<double>(), 900.0);
  EXPECT_EQ(verdict["top_actions"][1]["id"], "dataloader_bound");
}

// The answer first: the verdict (what bounds the step, its time, GPU busy, the actions that save
// the most), then the step breakdown, within a terminal's first screen; the departures from
// TensorBoard's and HTA's rules last. one_rank's steps, by hand: Kernel 2.5 of 5 ms (50.0%),
// DataLoader 0.9, host 1.6; steps of 2 and 3 ms: median 2.5 ms, the mean too; GPU busy 50.0%.
TEST(ReportTextTest, TheFirstScreenIsTheVerdictAndTheStepBreakdown) {
  const dlprof::Report report = dlprof::make_report(one_rank());
  ASSERT_GT(report.recommendations.size(), 1u);
  const std::vector<std::string> lines = lines_of(dlprof::render_text(report));
  const auto line_of = [&](const std::string& start) {
    const auto found = std::find_if(lines.begin(), lines.end(), [&](const std::string& line) { return line.rfind(start, 0) == 0; });
    EXPECT_NE(found, lines.end()) << start;
    return static_cast<std::size_t>(found - lines.begin());
  };
  const std::size_t verdict = line_of("Verdict: GPU compute bounds the step: kernels run 50.0% of it.");
  EXPECT_EQ(lines.at(verdict + 1), "  Step 2.50 ms (median of 2); GPU busy 50.0%.");
  EXPECT_EQ(lines.at(verdict + 2), "  Top actions, by the time they save:");
  ASSERT_EQ(report.verdict.top_actions, 3u);
  const std::size_t all_findings = line_of(fmt::format("  {} findings in all", report.recommendations.size()));
  std::string actions;  // the actions' lines, a wrapped one joined again
  for (std::size_t i = verdict + 3; i < all_findings; ++i) actions += lines[i].substr(lines[i].find_first_not_of(' ')) + " ";
  std::size_t at = 0;
  for (std::size_t i = 0; i < report.verdict.top_actions; ++i) {
    const dlprof::analysis::Recommendation& finding = report.recommendations[i];
    const std::size_t found = actions.find(fmt::format("{}. \u2248 ", i + 1), at);
    ASSERT_NE(found, std::string::npos) << actions;
    at = found;
    EXPECT_NE(actions.find(finding.action, at), std::string::npos) << actions;
  }
  // The NCCL kernel's 1.8 ms unhidden over 2 steps, then DataLoader 0.45 ms, of the 2.5 ms median step.
  EXPECT_EQ(report.recommendations[0].id, "low_comm_overlap");
  EXPECT_THAT(actions, ::testing::StartsWith("1. \u2248 0.900 ms/step, 36.0%: overlap communication with computation "));
  EXPECT_EQ(report.recommendations[1].id, "dataloader_bound");
  EXPECT_THAT(actions, HasSubstr("2. \u2248 0.450 ms/step, 18.0%: more loader workers"));
  const std::size_t breakdown = line_of("Step time breakdown");
  const std::size_t share = line_of("  Share of the average");
  EXPECT_LT(verdict, breakdown);
  EXPECT_LT(share, 24u) << "the step breakdown fits the first screen of a 24-line terminal";
  const std::size_t departures = line_of("== Where dlprof departs from TensorBoard and HTA on purpose");
  EXPECT_GT(departures, line_of("== Recommendations"));
  for (std::size_t i = 0; i < departures; ++i) EXPECT_THAT(lines[i], Not(HasSubstr("on purpose"))) << i;
}

TEST(ReportTest, DeparturesFromTensorBoardAndHtaComeLastAndInTheJson) {
  const dlprof::Report report = dlprof::make_report(one_rank());
  const std::size_t deviations = std::size(dlprof::analysis::kTensorBoardDeviations);
  const std::string text = dlprof::render_text(report);
  EXPECT_TRUE(has_line(text, "Step times and GPU summary, from TensorBoard's profiler plugin's rules:"));
  for (const dlprof::analysis::TensorBoardDeviation& deviation : dlprof::analysis::kTensorBoardDeviations)
    EXPECT_THAT(text, HasSubstr(fmt::format("\n  - {}\n", dlprof::detail::wrap(fmt::format("{}: {}", deviation.what, deviation.why), 96, "    "))));
  EXPECT_TRUE(has_line(text, "GPU time, kernel types, idle time, overlap and launches, from HTA's:"));
  for (const dlprof::analysis::HtaDeviation& deviation : dlprof::analysis::kHtaDeviations)
    EXPECT_THAT(text, HasSubstr(fmt::format("\n  - {}\n", dlprof::detail::wrap(fmt::format("{}: {}", deviation.what, deviation.why), 96, "    "))));
  const Json json = Json::parse(dlprof::render_json(report));
  ASSERT_EQ(json["tensorboard_deviations"].size(), deviations);
  for (const Json& deviation : json["tensorboard_deviations"]) {
    EXPECT_FALSE(deviation["what"].get<std::string>().empty());
    EXPECT_FALSE(deviation["why"].get<std::string>().empty());
  }
  ASSERT_EQ(json["hta_deviations"].size(), std::size(dlprof::analysis::kHtaDeviations));
  for (const Json& deviation : json["hta_deviations"]) {
    EXPECT_FALSE(deviation["what"].get<std::string>().empty());
    EXPECT_FALSE(deviation["why"].get<std::string>().empty());
  }
  const std::string html = dlprof::render_html(report);
  EXPECT_THAT(html, HasSubstr("TensorBoard's rules but for " + std::to_string(deviations) + " deviations"));
  const std::size_t details = html.find("<details");
  ASSERT_NE(details, std::string::npos);
  EXPECT_EQ(count_of(html.substr(details, html.find("</details>") - details), "<li>"), deviations);
}

// An MI300X trace: kernels on device 2, deviceProperties listing id 0, HIP memory (c10's Device
// Type 6), a hipBLASLt matrix-core GEMM.
dlprof::Trace amd_trace() {
  dlprof_test::AnalysisTraceBuilder builder;
  builder.device(0, "AMD Instinct MI300X", 9)
      .step(1, 0, kMs)
      .call("hipLaunchKernel", 10'000, 20'000, 1)
      .kernel("Cijk_Alik_Bljk_BBS_BH_MT256x256x64_MI16x16x1_SN_LDSB1", 100'000, 400'000, 1, 0, 1, /*device=*/2)
      .call("hipLaunchKernel", 30'000, 40'000, 2)
      .kernel("void at::native::vectorized_elementwise_kernel<4>()", 500'000, 600'000, 2, 0, 1, /*device=*/2);
  dlprof::Trace trace = builder.trace();
  trace.devices[0].total_global_mem = std::int64_t{192} << 30;
  dlprof::MemoryEvent hip;
  hip.time_ns = 200'000;
  hip.device_type = static_cast<dlprof::MemoryDeviceType>(6);
  hip.device = 2;
  hip.bytes = std::int64_t{3} << 30;
  hip.total_allocated = std::int64_t{3} << 30;
  trace.memory_events.push_back(hip);
  return trace;
}

TEST(ReportTest, AnAmdTraceNamesItsGpuAndHipMemoryAndSpeaksOfMatrixCores) {
  const dlprof::Report report = dlprof::make_report(amd_trace());
  const std::string text = dlprof::render_text(report);
  EXPECT_TRUE(has_line(text, R"(GPU summary over the steps \(TensorBoard; MC: dlprof's share of kernel time on matrix cores\))"));
  EXPECT_TRUE(has_line(text, R"(  GPU +Name +Utilization +Est\. SM efficiency +Est\. occupancy +MC \(dlprof\) +Kernels \(ms\))"));
  EXPECT_TRUE(has_line(text, R"(  2 +AMD Instinct MI300X \* +40\.0% +unknown +0\.0% +75\.0% +0\.400)"));
  EXPECT_THAT(unwrapped(text), HasSubstr("* deviceProperties does not list GPU 2: its name is that of the GPUs the trace "
                                         "lists (id 0), which are all one model."));
  EXPECT_TRUE(has_line(text, R"(  Cijk_Ali.*_MT256x256x64_MI16x16x1.* +COMPUTATION +yes +1 .*)"));
  EXPECT_TRUE(has_line(text, R"(  Name +Type +MC +Calls .*)"));
  EXPECT_TRUE(has_line(text, R"(Peak memory allocated:  HIP:2 3\.00 GiB of 192\.00 GiB \(1\.6%\))"));
  // Only the list of departures from TensorBoard, at the end, names its Tensor Core figure.
  EXPECT_THAT(text.substr(0, text.find("== Where dlprof departs")), Not(HasSubstr("Tensor Core")));
  EXPECT_THAT(text, Not(HasSubstr("CUDA:")));
  const Json json = Json::parse(dlprof::render_json(report));
  const Json& rank = json["ranks"][0];
  EXPECT_EQ(rank["matrix_units"], "matrix cores");
  EXPECT_EQ(rank["gpus"][0]["name"], "AMD Instinct MI300X");
  EXPECT_EQ(rank["gpus"][0]["name_from_id"], 0);
  EXPECT_DOUBLE_EQ(rank["gpus"][0]["dlprof_tensor_core_pct"].get<double>(), 75.0);
  EXPECT_EQ(rank["memory"][0]["device"], "HIP:2");
  EXPECT_EQ(rank["memory"][0]["capacity_bytes"], std::int64_t{192} << 30);
  EXPECT_THAT(dlprof::render_html(report), HasSubstr("AMD Instinct MI300X (deviceProperties lists no GPU 2: the model of id 0)"));

  // Two models listed, neither with the kernels' id: the trace does not say which GPU ran them.
  dlprof::Trace two_models = amd_trace();
  two_models.devices.push_back(two_models.devices[0]);
  two_models.devices[1].id = 1;
  two_models.devices[1].name = "AMD Instinct MI250X";
  const dlprof::Report unknown = dlprof::make_report(std::move(two_models));
  EXPECT_TRUE(has_line(dlprof::render_text(unknown), R"(  2 +unknown +40\.0% .*)"));
  EXPECT_TRUE(Json::parse(dlprof::render_json(unknown))["ranks"][0]["gpus"][0]["name"].is_null());
}

// torch.compile's Triton launch ops name a stream: HTA counts their CPU time as GPU computation,
// dlprof only with --hta-compat, and the report says which it did.
TEST(ReportTest, SaysWhetherCpuOpsNamingAStreamCountAsGpuWork) {
  const auto trace = [] {
    return dlprof_test::AnalysisTraceBuilder()
        .step(1, 0, kMs)
        .call("cudaLaunchKernel", 0, 1'000, 1)
        .kernel(kGemm, 10'000, 20'000, 1)
        .op_on_stream("triton_poi_fused_add_0", 30'000, 40'000, 7)
        .op_on_stream("triton_red_fused_sum_1", 50'000, 52'000, 7)
        .trace();
  };
  const dlprof::Report exact = dlprof::make_report(trace());
  EXPECT_THAT(unwrapped(dlprof::render_text(exact)),
              HasSubstr("Not counted as GPU time above, unlike HTA: 2 CPU ops naming a GPU stream (torch.compile's triton_* "
                        "launches), 0.012 ms of CPU time, which HTA counts as GPU computation (--hta-compat counts them so "
                        "too)."));
  const Json json = Json::parse(dlprof::render_json(exact));
  EXPECT_EQ(json["ranks"][0]["cpu_ops_on_streams"]["count"], 2);
  EXPECT_DOUBLE_EQ(json["ranks"][0]["cpu_ops_on_streams"]["total_us"].get<double>(), 12.0);
  EXPECT_FALSE(json["ranks"][0]["cpu_ops_on_streams"]["counted_as_gpu_work"].get<bool>());
  EXPECT_DOUBLE_EQ(json["ranks"][0]["temporal_breakdown"]["compute_us"].get<double>(), 10.0);

  dlprof::ReportOptions options;
  options.analysis.hta_compat = true;
  const dlprof::Report compat = dlprof::make_report(trace(), options);
  EXPECT_THAT(unwrapped(dlprof::render_text(compat)), HasSubstr("Counted as GPU computation above, as HTA counts them: 2 CPU ops naming"));
  const Json compat_json = Json::parse(dlprof::render_json(compat));
  EXPECT_TRUE(compat_json["ranks"][0]["cpu_ops_on_streams"]["counted_as_gpu_work"].get<bool>());
  EXPECT_DOUBLE_EQ(compat_json["ranks"][0]["temporal_breakdown"]["compute_us"].get<double>(), 22.0);
}

// Work that overlaps earlier work on its stream: the report says so instead of a negative share.
TEST(ReportTest, OverlappingWorkOnAStreamIsNamedNotANegativeShare) {
  const dlprof::Report report = dlprof::make_report(dlprof_test::AnalysisTraceBuilder()
                                                        .step(1, 0, kMs)
                                                        .call("cudaLaunchKernel", 0, 1'000, 1)
                                                        .call("cudaLaunchKernel", 2'000, 3'000, 2)
                                                        .call("cudaLaunchKernel", 4'000, 5'000, 3)
                                                        .kernel(kGemm, 10'000, 110'000, 1)
                                                        .kernel(kGemm, 100'000, 150'000, 2)
                                                        .kernel(kGemm, 160'000, 170'000, 3)
                                                        .trace());
  const std::string text = dlprof::render_text(report);
  EXPECT_TRUE(has_line(text, R"( +0 +7 +0\.010 +0\.0% +100\.0% +0\.0%)"));
  EXPECT_THAT(unwrapped(text), HasSubstr("Work that starts before earlier work on its stream has ended runs alongside it "
                                         "(the trace's timestamps overlap), which is not idle time and is left out above: "
                                         "GPU 0 stream 7: 1 piece of work, 0.010 ms."));
  EXPECT_THAT(text, Not(HasSubstr("-0.")));
  const Json json = Json::parse(dlprof::render_json(report));
  EXPECT_EQ(json["ranks"][0]["idle_time_breakdown"][0]["overlaps"], 1);
  EXPECT_DOUBLE_EQ(json["ranks"][0]["idle_time_breakdown"][0]["overlap_us"].get<double>(), 10.0);
  EXPECT_DOUBLE_EQ(json["ranks"][0]["idle_time_breakdown"][0]["kernel_wait_us"].get<double>(), 10.0);
}

TEST(ReportTest, SaysWhatReadingTheFileLeftOut) {
  dlprof::Trace trace = one_rank();
  const dlprof::Report clean = dlprof::make_report(trace);
  EXPECT_THAT(dlprof::render_text(clean), Not(HasSubstr("Read with changes")));
  trace.read_result.skipped_events = 3;
  trace.read_result.first_skip_offset = 812;
  trace.read_result.first_skip_reason = "\"dur\" must not be negative: -4";
  trace.read_result.ignored_values = 1;
  trace.read_result.notes = {"2 slices of category \"npu_op\", which dlprof does not know, counted as GPU kernels"};
  const dlprof::Report report = dlprof::make_report(std::move(trace));
  const std::string text = dlprof::render_text(report);
  EXPECT_TRUE(has_line(text, "Read with changes \\(this rank's numbers are of what was read\\):"));
  EXPECT_TRUE(has_line(text, R"(  3 events left out, unusable on their own; the first, at byte 812: "dur" must not be negative: -4)"));
  EXPECT_TRUE(has_line(text, R"(  2 slices of category "npu_op", which dlprof does not know, counted as GPU kernels)"));
  const Json json = Json::parse(dlprof::render_json(report));
  const Json& read = json["ranks"][0]["read"];
  EXPECT_EQ(read["skipped_events"], 3);
  EXPECT_EQ(read["first_skip"]["offset"], 812);
  EXPECT_EQ(read["first_skip"]["reason"], "\"dur\" must not be negative: -4");
  EXPECT_EQ(read["ignored_values"], 1);
  EXPECT_EQ(read["notes"].size(), 1u);
  EXPECT_TRUE(Json::parse(dlprof::render_json(clean))["ranks"][0]["read"]["first_skip"].is_null());
  EXPECT_THAT(dlprof::render_html(report), HasSubstr("counted as GPU kernels"));
}

TEST(ReportTest, SaysWhatRecordingLost) {
  dlprof::Trace trace = one_rank();
  const dlprof::Report clean = dlprof::make_report(trace);
  EXPECT_THAT(dlprof::render_text(clean), Not(HasSubstr("Lost while recording")));
  EXPECT_THAT(dlprof::render_text(clean), Not(HasSubstr("name table full")));
  trace.dropped_events = 5;
  trace.overflowed_names = 7;
  const dlprof::Report report = dlprof::make_report(std::move(trace));
  const std::string text = dlprof::render_text(report);
  EXPECT_TRUE(has_line(text, "Lost while recording: 5 events, 0 GPU records \\(the numbers above miss them\\)"));
  EXPECT_THAT(text, HasSubstr("7 names were recorded as \"<dlprof: name table full>\""));
  EXPECT_THAT(text, HasSubstr("ProfilerOptions::name_table_bytes"));
  const Json json = Json::parse(dlprof::render_json(report));
  EXPECT_EQ(json["ranks"][0]["dropped_events"], 5);
  EXPECT_EQ(json["ranks"][0]["overflowed_names"], 7);
  EXPECT_EQ(Json::parse(dlprof::render_json(clean))["ranks"][0]["overflowed_names"], 0);
  EXPECT_THAT(dlprof::render_html(report), HasSubstr("7 names were recorded as &quot;&lt;dlprof: name table full&gt;&quot;"));
}

TEST(ReportJsonTest, RankComparisonAndStragglers) {
  const Json json = Json::parse(dlprof::render_json(dlprof::make_report(two_ranks())));
  ASSERT_EQ(json["ranks"].size(), 2u);
  EXPECT_EQ(json["ranks"][0]["rank"], 0);
  EXPECT_EQ(json["ranks"][1]["rank"], 1);
  const Json& comparison = json["rank_comparison"];
  ASSERT_EQ(comparison["ranks"].size(), 2u);
  EXPECT_DOUBLE_EQ(comparison["ranks"][1]["step_time_mean_us"].get<double>(), 3000.0);
  ASSERT_EQ(comparison["stragglers"].size(), 2u);
  const Json& step = comparison["stragglers"][1];
  EXPECT_EQ(step["step"], 2);
  EXPECT_EQ(step["slowest_rank"], 1);
  EXPECT_DOUBLE_EQ(step["slowest_us"].get<double>(), 4000.0);
  EXPECT_DOUBLE_EQ(step["median_us"].get<double>(), 3500.0);
  EXPECT_EQ(step["fastest_rank"], 0);
  EXPECT_NEAR(step["slowest_over_median_pct"].get<double>(), 100.0 / 7, 1e-9);
}

TEST(ReportJsonTest, NamesThatAreNotUtf8OrHoldControlCharacters) {
  dlprof::Trace trace = one_rank();
  for (std::string& name : trace.names)
    if (name == kGemm) name = "bad\xff\xfe name\twith\x01 control \xe2\x82";
  const Json json = Json::parse(dlprof::render_json(dlprof::make_report(trace)));  // throws on invalid UTF-8
  EXPECT_EQ(json["ranks"][0]["top_kernels"][1]["name"], "bad\xEF\xBF\xBD\xEF\xBF\xBD name\twith\x01 control \xEF\xBF\xBD\xEF\xBF\xBD");
  const std::string html = dlprof::render_html(dlprof::make_report(trace));
  EXPECT_THAT(html, HasSubstr("bad\xEF\xBF\xBD\xEF\xBF\xBD name"));
}

// one_rank() with hostile names: the op and the gemm kernel hold terminal escape sequences (set
// the window title, clear the screen, colour), a newline, a tab, DEL and C1's CSI; a range and
// the thread name are not UTF-8 (a name cut mid-character).
dlprof::Trace hostile_rank() {
  dlprof::Trace trace = one_rank_builder().range("cut range \xe2\x82", 4'200'000, 4'300'000).trace();
  add_memory(trace);
  for (std::string& name : trace.names) {
    if (name == "aten::mm") name = "op\x1b]0;t\x07\x1b[2J\nx\ty\x7f";
    if (name == kGemm) name = "gemm\x1b[31mred\x1b[0m\xc2\x9b" "1m\n\tend";
  }
  trace.threads[0].name = "w-\xce\xb1\xce";
  return trace;
}

TEST(ReportTextTest, ControlCharactersInNamesNeverReachTheTerminal) {
  dlprof::Trace trace = hostile_rank();
  trace.read_result.notes.push_back("a note from the file \x1b[2J");
  dlprof::ReportOptions options;
  options.title = "run\x1b]0;title\x07";
  const std::string text = dlprof::render_text(dlprof::make_report(trace, options));
  EXPECT_TRUE(is_valid_utf8(text));
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  EXPECT_EQ(text.find("\xc2\x9b"), std::string::npos);
  EXPECT_EQ(text.find('\x7f'), std::string::npos);
  EXPECT_EQ(std::count_if(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20 && c != '\n'; }),
            0);
  // Shown as escapes, one column each, so that rows keep their alignment.
  EXPECT_THAT(text, HasSubstr(R"(op\x1b]0;t\x07\x1b[2J\nx\ty\x7f)"));
  EXPECT_THAT(text, HasSubstr(R"(gemm\x1b[31mred\x1b[0m\u009b1m\n\tend)"));
  EXPECT_THAT(text, HasSubstr("cut range \xEF\xBF\xBD\xEF\xBF\xBD"));
  EXPECT_THAT(text, HasSubstr(R"(dlprof report: run\x1b]0;title\x07)"));
  EXPECT_THAT(text, HasSubstr(R"(a note from the file \x1b[2J)"));

  // Every line of the top ops and top kernels tables (header, rule, rows) ends at the same column:
  // their last columns are right-aligned.
  const std::vector<std::string> lines = lines_of(text);
  for (const std::string_view title : {"Top ops and ranges by self CPU time", "Top kernels by GPU time"}) {
    SCOPED_TRACE(title);
    auto line = std::find_if(lines.begin(), lines.end(), [&](const std::string& l) { return l.rfind(title, 0) == 0; });
    ASSERT_NE(line, lines.end());
    std::vector<std::string> table;
    for (++line; line != lines.end() && !line->empty(); ++line) table.push_back(*line);
    ASSERT_GE(table.size(), 4u);  // header, rule, two rows or more
    for (const std::string& row : table)
      EXPECT_EQ(dlprof::detail::text_width(row), dlprof::detail::text_width(table[0])) << row;
  }
}

TEST(ReportJsonTest, EveryWriterWritesValidUtf8) {
  const dlprof::Report report = dlprof::make_report(hostile_rank());
  const std::string json_text = dlprof::render_json(report);
  EXPECT_TRUE(is_valid_utf8(json_text));
  Json json;
  ASSERT_NO_THROW(json = Json::parse(json_text));  // nlohmann refuses invalid UTF-8
  bool found = false;
  for (const Json& op : json["ranks"][0]["top_ops"]) found = found || op["name"] == "cut range \xEF\xBF\xBD\xEF\xBF\xBD";
  EXPECT_TRUE(found) << json["ranks"][0]["top_ops"].dump();
  const std::string html = dlprof::render_html(report);
  EXPECT_TRUE(is_valid_utf8(html));
  EXPECT_TRUE(well_formed(html));
  EXPECT_THAT(html, HasSubstr("cut range \xEF\xBF\xBD\xEF\xBF\xBD"));
  EXPECT_TRUE(is_valid_utf8(dlprof::render_text(report)));
}

// kHostileName as an op, a kernel, a note from the file and the title: the report's JSON is
// JSON that Python's json module and RapidJSON accept, its page is UTF-8 without a control
// character HTML does not allow, and each holds the name as detail/text.hpp repairs it.
TEST(ReportJsonTest, HostileNamesMakeJsonAndHtmlThatPythonAndRapidJsonAccept) {
  const std::string& hostile = dlprof_test::kHostileName;
  const std::string repaired = dlprof_test::repaired_hostile_name();
  dlprof::Trace trace = one_rank();
  for (std::string& name : trace.names)
    if (name == "aten::mm" || name == kGemm) name = hostile;
  trace.read_result.notes.push_back(hostile);
  dlprof::ReportOptions options;
  options.title = hostile;
  const dlprof::Report report = dlprof::make_report(trace, options);
  const std::string json_text = dlprof::render_json(report);
  const std::string html = dlprof::render_html(report);
  EXPECT_TRUE(is_valid_utf8(json_text));
  EXPECT_TRUE(is_valid_utf8(html));
  EXPECT_TRUE(well_formed(html));
  EXPECT_EQ(html.find('\0'), std::string::npos);
  // Shown as the terminal shows them; & < > " ' as entities.
  EXPECT_THAT(html, HasSubstr(R"(hostile\x00nul \x01\x1f\x7f &quot;quoted&quot; back\slash )"));
  EXPECT_THAT(html, HasSubstr("back\\slash \xEF\xBF\xBD\xEF\xBF\xBD cut"));

  // The title, the note, the op's row and the kernel's rows (top kernels, kernels by type, GPU
  // activities): each exactly the repaired name.
  const auto expect_hostile_strings = [&](const std::vector<std::string>& strings) {
    EXPECT_GE(strings.size(), 5u);
    for (const std::string& string : strings) EXPECT_EQ(string, repaired) << dlprof_test::hex_of(string);
  };
#if DLPROF_TEST_HAS_RAPIDJSON
  std::string error;
  const std::vector<std::string> found = dlprof_test::rapidjson_hostile_strings(json_text, &error);
  EXPECT_EQ(error, "");
  expect_hostile_strings(found);
#endif

  const dlprof_test::TempDir dir;
  const std::filesystem::path json_path = dir.path() / "report.json";
  const std::filesystem::path html_path = dir.path() / "report.html";
  std::ofstream(json_path, std::ios::binary) << json_text;
  std::ofstream(html_path, std::ios::binary) << html;
  const auto python = dlprof_test::run_python(dir.path(), dlprof_test::kPythonHostileStrings, {json_path.string()});
  if (!python) GTEST_SKIP() << "no python3 to run: Python's json and html.parser not tried";
  ASSERT_EQ(python->status, 0) << python->output;
  const std::vector<std::string> from_python = dlprof_test::strings_from_hex_lines(python->output);
  expect_hostile_strings(from_python);
#if DLPROF_TEST_HAS_RAPIDJSON
  EXPECT_EQ(from_python, found);
#endif

  // The page: strict UTF-8, no control character but tab, newline and carriage return (NUL,
  // C0, DEL and C1 are parse errors in HTML), parsed by Python's html.parser.
  constexpr std::string_view kPythonHtml = R"(import html.parser, re, sys
with open(sys.argv[1], 'rb') as f:
    text = f.read().decode('utf-8')
bad = re.search('[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]', text)
if bad:
    sys.exit('control character U+%04X at %d' % (ord(bad.group()), bad.start()))
parser = html.parser.HTMLParser()
parser.feed(text)
parser.close()
print('ok')
)";
  const auto page = dlprof_test::run_python(dir.path(), kPythonHtml, {html_path.string()});
  ASSERT_TRUE(page.has_value());
  EXPECT_EQ(page->status, 0) << page->output;
  EXPECT_EQ(page->output, "ok\n");
#if !DLPROF_TEST_HAS_RAPIDJSON
  GTEST_SKIP() << "RapidJSON's headers not found: checked with Python only";
#endif
}

TEST(ReportHtmlTest, WellFormedSelfContainedAndEscaped) {
  const std::string html = dlprof::render_html(dlprof::make_report(one_rank()));
  EXPECT_TRUE(well_formed(html));
  EXPECT_TRUE(self_contained(html));
  EXPECT_THAT(html, HasSubstr("void gemm&lt;float, 4&gt;(T&amp;, &quot;x&quot;)"));
  EXPECT_THAT(html, Not(HasSubstr("gemm<float")));
}

// The page opens with the verdict, its top actions with what each saves, before the
// recommendations, each with its saving.
TEST(ReportHtmlTest, TheVerdictComesFirstWithTheTopActions) {
  const dlprof::Report report = dlprof::make_report(one_rank());
  const std::string html = dlprof::render_html(report);
  const std::size_t verdict = html.find("<section id=\"verdict\">");
  ASSERT_NE(verdict, std::string::npos);
  EXPECT_LT(verdict, html.find("<section id=\"recommendations\">"));
  EXPECT_LT(verdict, html.find("<svg"));
  EXPECT_NE(html.find("<p>GPU compute bounds the step: kernels run 50.0% of it.</p>", verdict), std::string::npos);
  EXPECT_NE(html.find("<p>Step 2.50 ms (median of 2); GPU busy 50.0%.</p>", verdict), std::string::npos);
  EXPECT_EQ(count_of(html.substr(verdict, html.find("</section>", verdict) - verdict), "<li>"), 3u);
  EXPECT_NE(html.find("<li><strong>\u2248 0.900 ms/step, 36.0%</strong> overlap communication with computation "
                      "<code>low_comm_overlap</code></li>",
                      verdict),
            std::string::npos);
  EXPECT_NE(html.find("<li><p>[\u2248 0.450 ms/step, 18.0%] 18.0% of the step is DataLoader"), std::string::npos);
}

TEST(ReportHtmlTest, OneSvgPerChart) {
  const std::string html = dlprof::render_html(dlprof::make_report(one_rank()));
  // Steps, kernel types, top kernels, memory, memory by category on each of two devices.
  EXPECT_EQ(count_of(html, "<svg"), 6u);
  EXPECT_EQ(count_of(html, "<svg class=\"chart\""), 6u);
  for (const std::string_view id : {"rank-0-steps", "rank-0-kernel-types", "rank-0-top-kernels", "rank-0-memory",
                                    "rank-0-memory-cpu", "rank-0-memory-cuda0"})
    EXPECT_THAT(html, HasSubstr(fmt::format("<svg class=\"chart\" id=\"{}\"", id)));
  // Stacked bars: one segment per role of each step (5 + 3), pie slices, one bar per kernel.
  EXPECT_EQ(count_of(html, "<rect class=\"mark\""), 8u + 3u);
  // 2 slices, 2 memory curves, one band (unknown: no op says what the allocations hold) a device.
  EXPECT_EQ(count_of(html, "<path class=\"mark\""), 2u + 2u + 2u);

  const std::string two = dlprof::render_html(dlprof::make_report(two_ranks()));
  EXPECT_TRUE(well_formed(two));
  // Ranks compared, the collectives of their NCCL kernels, then per rank without memory events.
  EXPECT_EQ(count_of(two, "<svg"), 1u + 1u + 2u * 3u);
  EXPECT_THAT(two, HasSubstr("id=\"ranks-average-step\""));
  EXPECT_THAT(two, HasSubstr("No memory events in this trace"));
  EXPECT_THAT(two, HasSubstr("Step times across ranks: the slowest and the fastest rank of each step"));
}

TEST(ReportHtmlTest, ASingleKernelTypeIsAFullCircle) {
  const dlprof::Trace trace = dlprof_test::AnalysisTraceBuilder()
                                  .step(1, 0, kMs)
                                  .call("cudaLaunchKernel", 10, 20, 1)
                                  .kernel("k", 100, 500, 1)
                                  .trace();
  const std::string html = dlprof::render_html(dlprof::make_report(trace));
  EXPECT_TRUE(well_formed(html));
  EXPECT_EQ(count_of(html, "<circle class=\"mark\""), 1u);
}

TEST(ReportDetailTest, ShortenAndWrap) {
  using dlprof::detail::shorten;
  EXPECT_EQ(shorten("abcdefghij", 10), "abcdefghij");
  EXPECT_EQ(shorten("abcdefghijk", 10), "abcd...ijk");
  EXPECT_EQ(shorten("\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9\xc3\xa9", 5), "\xc3\xa9...\xc3\xa9");  // never inside a character
  EXPECT_EQ(dlprof::detail::wrap("one two three four", 9, "  "), "one two\n  three\n  four");
  EXPECT_EQ(dlprof::detail::html_escape("<a href='x'>&</a>"), "&lt;a href=&#39;x&#39;&gt;&amp;&lt;/a&gt;");
}

TEST(ReportMemoryTest, LongCurvesKeepTheirPeaks) {
  dlprof::Trace trace = one_rank();
  trace.memory_events.clear();
  for (std::int64_t i = 0; i < 100'000; ++i) {
    dlprof::MemoryEvent event;
    event.time_ns = i * 1000;
    event.total_allocated = i == 54'321 ? 999'999 : i % 100;
    trace.memory_events.push_back(event);
  }
  const dlprof::Report report = dlprof::make_report(trace);
  ASSERT_EQ(report.ranks[0].memory.size(), 1u);
  const auto& points = report.ranks[0].memory[0].points;
  EXPECT_LE(points.size(), dlprof::MemoryCurve::kMaxPoints);
  EXPECT_EQ(report.ranks[0].memory[0].peak_bytes, 999'999);
  EXPECT_TRUE(std::any_of(points.begin(), points.end(), [](const auto& p) { return p.second == 999'999; }));
  EXPECT_TRUE(std::is_sorted(points.begin(), points.end()));
}

TEST(ReportMemoryTest, MemoryEventsThatNeverAllocatePrintNothing) {
  dlprof::Trace trace = one_rank();
  for (dlprof::MemoryEvent& event : trace.memory_events) event.total_allocated = 0;
  const dlprof::Report report = dlprof::make_report(trace);
  EXPECT_TRUE(report.ranks[0].memory.empty());
  EXPECT_THAT(dlprof::render_text(report), Not(HasSubstr("Peak memory")));
}

// ---- presentation: units, kernel names, idle threads, a healthy run --------------------------------

TEST(ReportTextTest, EachStepColumnHasItsOwnUnitWhereTheyDiffer) {
  // A 41 s step whose GPU ran 8 ms of kernels: not "0.008".
  const dlprof::Trace trace = dlprof_test::AnalysisTraceBuilder()
                                  .device(0, "A100", 8)
                                  .step(1, 0, 41'000 * kMs)
                                  .op("aten::mm", kMs, 40'000 * kMs, 7)
                                  .call("cudaLaunchKernel", 2 * kMs, 3 * kMs, 1, 7)
                                  .kernel(kGemm, 10 * kMs, 18 * kMs, 1, 7)
                                  .trace();
  const std::string text = dlprof::render_text(dlprof::make_report(trace));
  // The step's unit in the title; a column it would show under 0.01 names its own.
  EXPECT_TRUE(has_line(text, R"(Step time breakdown \(s\), TensorBoard's roles by priority)"));
  EXPECT_TRUE(has_line(text, R"(  Step +Total +Kernel \(ms\) +Runtime \(ms\) +CPU Exec +Other)"));
  EXPECT_TRUE(has_line(text, R"(  ProfilerStep#1 +41\.000 +8\.000 +1\.000 +39\.990 +1\.001)"));
}

TEST(ReportTest, TopKernelsShowShortNamesAndKeepTheFullOnesInJsonAndHtml) {
  constexpr std::string_view kAdd = dlprof_test::kBf16AddKernel;
  constexpr std::string_view kMul = dlprof_test::kBf16MulKernel;
  const dlprof::Trace trace = dlprof_test::AnalysisTraceBuilder()
                                  .device(0, "A100", 8)
                                  .step(1, 0, 10 * kMs)
                                  .call("cudaLaunchKernel", kMs, kMs + 10'000, 1)
                                  .kernel(kAdd, 2 * kMs, 5 * kMs, 1)
                                  .call("cudaLaunchKernel", 2 * kMs, 2 * kMs + 10'000, 2)
                                  .kernel(kMul, 5 * kMs, 7 * kMs, 2)
                                  .call("cudaMemcpyAsync", 3 * kMs, 3 * kMs + 10'000, 3)
                                  .memcpy(1, 7 * kMs, 8 * kMs, 3, 1 << 20)
                                  .trace();
  const dlprof::Report report = dlprof::make_report(trace);
  const std::string text = dlprof::render_text(report);
  // Add and Mul apart, their functors kept whole within the 48 columns: the function's name is cut.
  EXPECT_TRUE(has_line(text, R"(  vectorized_e\.\.\.kernel<CUDAFunctor_add<BFloat16>> +COMPUTATION .* 60\.0%)"));
  EXPECT_TRUE(has_line(text, R"(  vectorized_elementwise_kernel<MulFunctor<float>> +COMPUTATION .* 40\.0%)"));
  // nvprof's summary leaves the kernels to the table above: copies and API calls only.
  EXPECT_TRUE(has_line(text, R"(  GPU activities +16\.7% +1\.000ms +1 .*\[CUDA memcpy HtoD\])"));
  EXPECT_EQ(count_of(text, "<CUDAFunctor_add<BFloat16>>"), 1u);
  const Json json = Json::parse(dlprof::render_json(report));
  const Json& top = json["ranks"][0]["top_kernels"];
  EXPECT_EQ(top[0]["name"], std::string(kAdd));
  EXPECT_EQ(top[0]["short_name"], "vectorized_e...kernel<CUDAFunctor_add<BFloat16>>");
  const std::string html = dlprof::render_html(report);
  EXPECT_THAT(html, HasSubstr(">vectorized_elementwise_kernel&lt;MulFunctor&lt;float&gt;&gt;</td>"));
  EXPECT_THAT(html, HasSubstr("title=\"void at::native::vectorized_elementwise_kernel&lt;4, at::native::CUDAFunctor_add"));
}

TEST(ReportTest, ThreadsThatOnlyWaitAreIdleThreadsNotTopOps) {
  // A pipeline's other thread waits 47 ms in threading's wait; the training thread waits 2 ms
  // in a DataLoader's queue, which is its step's time and stays an op.
  dlprof_test::AnalysisTraceBuilder builder = one_rank_builder();
  builder.python_frame("threading.py(1032): _bootstrap", 0, 47 * kMs, dlprof::Category::User, 1)
      .python_frame("threading.py(655): wait", kMs / 10, 47 * kMs, dlprof::Category::User, 1)
      .python_frame("threading.py(359): wait", kMs / 5, 47 * kMs, dlprof::Category::User, 1)
      .python_frame("queue.py(180): get", 3 * kMs, 4 * kMs);
  const dlprof::Report report = dlprof::make_report(builder.trace());
  const std::string text = dlprof::render_text(report);
  EXPECT_TRUE(has_line(text, R"(Idle threads: Python frames of other threads that only wait \(left out of the ops above\))"));
  EXPECT_TRUE(has_line(text, R"(  101 \(backward\) +46\.900ms +1 +threading\.py\(359\): wait)"));
  for (const dlprof::KeyAverage& op : report.ranks[0].top_ops) EXPECT_THAT(op.name, Not(HasSubstr("): wait"))) << op.name;
  EXPECT_TRUE(has_line(text, R"(  queue\.py\(180\): get +User .*)"));
  const Json json = Json::parse(dlprof::render_json(report));
  EXPECT_EQ(json["ranks"][0]["idle_threads"][0]["frame"], "threading.py(359): wait");
  EXPECT_EQ(json["ranks"][0]["idle_threads"][0]["thread"], 101);
  EXPECT_THAT(dlprof::render_html(report), HasSubstr("Idle threads"));
}

TEST(ReportTest, AHealthyRunSaysWhatOverlapsWithWhat) {
  // Compute on two streams and an all-reduce on a third, each step 10 ms: the GPU busy from 0.1 ms
  // to the end, the kernels adding up to 9.66 + 6 + 6 ms, computation covering 5.76 of the
  // all-reduce's 6 ms.
  constexpr std::string_view kCublasGemm =
      "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas";
  dlprof_test::AnalysisTraceBuilder builder;
  builder.device(0, "NVIDIA H100 80GB HBM3", 9);
  std::uint32_t id = 1;
  for (std::int64_t s = 0; s < 3; ++s) {
    const std::int64_t at = s * 10 * kMs;
    builder.step(s + 1, at, at + 10 * kMs);
    builder.call("cudaLaunchKernel", at + 10'000, at + 20'000, id).kernel(kCublasGemm, at + 100'000, at + 9'760'000, id, 0, 7);
    ++id;
    builder.call("cudaLaunchKernel", at + 30'000, at + 40'000, id).kernel(kCublasGemm, at + 200'000, at + 6'200'000, id, 0, 8);
    ++id;
    builder.call("cudaLaunchKernel", at + 50'000, at + 60'000, id)
        .kernel(kNcclAllReduce, at + 4'000'000, at + 10'000'000, id, 0, 9);
    ++id;
  }
  const dlprof::Report report = dlprof::make_report(builder.trace());
  ASSERT_EQ(report.verdict.top_actions, 0u) << report.recommendations.front().id;
  const std::string text = unwrapped(dlprof::render_text(report));
  EXPECT_THAT(text, HasSubstr("Top actions: none; no rule found time to save."));
  EXPECT_THAT(text, HasSubstr("Why: the GPU is busy 99.0% of the steps; its kernels add up to 2.2x the steps' span on 3 "
                              "streams, running side by side; communication is 96.0% hidden under computation."));
  const Json json = Json::parse(dlprof::render_json(report));
  EXPECT_THAT(json["verdict"]["why"].get<std::string>(), HasSubstr("96.0% hidden under computation"));
  EXPECT_TRUE(Json::parse(dlprof::render_json(dlprof::make_report(one_rank())))["verdict"]["why"].is_null());
}

TEST(ReportProfilerTest, ReportOfTheLastWindowAndFromAHandler) {
  std::string from_handler;
  dlprof::Profiler prof(dlprof::ProfilerOptions{}
                            .schedule(dlprof::schedule(/*wait=*/0, /*warmup=*/1, /*active=*/2, /*repeat=*/1))
                            .on_trace_ready([&](const dlprof::Trace& trace) { from_handler = dlprof::report(trace); }));
  EXPECT_THAT(prof.report(), HasSubstr("no trace yet"));
  prof.start();
  for (int step = 0; step < 4; ++step) {
    {
      DLPROF_RANGE("train_step");
      DLPROF_RANGE("enumerate(DataLoader)#TestLoader.__next__", dlprof::Category::DataLoader);
    }
    prof.step();
  }
  prof.stop();
  const std::string text = prof.report();
  EXPECT_EQ(text, from_handler);
  EXPECT_TRUE(has_line(text, R"(  ProfilerStep#1 .*)"));
  EXPECT_TRUE(has_line(text, R"(  ProfilerStep#2 .*)"));
  EXPECT_THAT(text, HasSubstr("enumerate(DataLoader)#TestLoader.__next__"));
  EXPECT_THAT(text, HasSubstr("No GPU activity in this trace"));
}

// Two 10 ms steps: the training thread runs 6 and 8 ms of them and waits for a CPU 1 and 0.5 ms,
// waits 2 ms for data and 1 ms in cudaStreamSynchronize; two loader threads run 15 and 5 ms.
TEST(ReportTest, HowBusyEachCpuThreadIsInTextJsonAndHtml) {
  dlprof_test::AnalysisTraceBuilder builder;
  builder.thread(102, "worker-a").thread(103, "worker-b");
  builder.step(1, 0, 10 * kMs).step(2, 10 * kMs, 20 * kMs);
  builder.range("enumerate(DataLoader)#Loader.__next__", 0, 2 * kMs, dlprof::Category::DataLoader);
  builder.call("cudaStreamSynchronize", 12 * kMs, 13 * kMs, 1);
  builder.range("load_batch", 0, 19 * kMs, dlprof::Category::DataLoader, 2);
  builder.range("load_batch", 1 * kMs, 18 * kMs, dlprof::Category::DataLoader, 3);
  builder.cpu_reading(0, 0, 100 * kMs, 7 * kMs)
      .cpu_reading(0, 10 * kMs, 106 * kMs, 8 * kMs)
      .cpu_reading(0, 20 * kMs, 114 * kMs, 8 * kMs + kMs / 2);
  builder.cpu_reading(2, 0, 0, 0).cpu_reading(2, 10 * kMs, 7 * kMs, 0).cpu_reading(2, 20 * kMs, 15 * kMs, 0);
  builder.cpu_reading(3, 0, 0, 0).cpu_reading(3, 10 * kMs, 2 * kMs, 0).cpu_reading(3, 20 * kMs, 5 * kMs, 0);
  const dlprof::Report report = dlprof::make_report(builder.trace());

  const std::string text = unwrapped(dlprof::render_text(report));
  EXPECT_THAT(text, HasSubstr("How busy each CPU thread is: time on a CPU, waiting for one, and blocked, over 2 steps (3 threads)"));
  // 14 of 20 ms running, 1.5 waiting for a CPU, 4.5 blocked: 2.25 ms a step, of which 1 ms for
  // data, 0.5 ms in the sync, and at least 0.75 ms elsewhere.
  EXPECT_THAT(text, HasSubstr("The training thread ran 70.0% of the time, waited for a CPU 7.5% and was blocked 22.5% "
                              "(2.250ms a step)."));
  EXPECT_THAT(text, HasSubstr("In the trace it waited for data 1.000ms a step and in syncs with the GPU 500.000us a step; "
                              "at least 750.000us a step of its blocked time was neither: a lock, I/O, a sleep."));
  EXPECT_THAT(text, HasSubstr("It waited for a CPU 7.5% of the time"));
  EXPECT_THAT(text, HasSubstr("The 2 loader threads ran 50.0% of the time on average: the busiest, worker-a [102], 75.0%, "
                              "the idlest, worker-b [103], 25.0% (1.50 times the mean)."));
  EXPECT_THAT(text, HasSubstr("The training thread waited for data 10.0% of the time while the loaders were mostly idle"));
  EXPECT_THAT(text, HasSubstr("60 80"));  // the training thread's steps on a CPU, in percent

  const Json json = Json::parse(dlprof::render_json(report));
  const Json& cpu = json.at("ranks").at(0).at("thread_cpu");
  EXPECT_EQ(cpu.at("steps"), Json::array({1, 2}));
  const Json& main = cpu.at("threads").at(0);
  EXPECT_EQ(main.at("role"), "training");
  EXPECT_EQ(main.at("thread"), 100);
  EXPECT_DOUBLE_EQ(main.at("cpu_pct").get<double>(), 70.0);
  EXPECT_DOUBLE_EQ(main.at("waiting_for_cpu_pct").get<double>(), 7.5);
  EXPECT_DOUBLE_EQ(main.at("steps").at(1).at("blocked_pct").get<double>(), 15.0);
  const Json& training = cpu.at("training");
  EXPECT_DOUBLE_EQ(training.at("blocked_us").get<double>(), 4500.0);
  EXPECT_DOUBLE_EQ(training.at("waiting_for_data_us").get<double>(), 2000.0);
  EXPECT_DOUBLE_EQ(training.at("in_sync_us").get<double>(), 1000.0);
  EXPECT_DOUBLE_EQ(training.at("blocked_elsewhere_us").get<double>(), 1500.0);
  EXPECT_EQ(cpu.at("loaders").at("busiest"), 102);
  EXPECT_DOUBLE_EQ(cpu.at("loaders").at("mean_cpu_pct").get<double>(), 50.0);

  const std::string html = dlprof::render_html(report);
  EXPECT_THAT(html, HasSubstr("How busy each CPU thread is"));
  EXPECT_THAT(html, HasSubstr("worker-b [103]"));
}

// A trace without readings (every torch.profiler trace) has no such section.
TEST(ReportTest, NoThreadCpuSectionWithoutReadings) {
  dlprof_test::AnalysisTraceBuilder builder;
  builder.step(1, 0, 10 * kMs).range("work", 0, 5 * kMs);
  const dlprof::Report report = dlprof::make_report(builder.trace());
  EXPECT_THAT(dlprof::render_text(report), Not(HasSubstr("How busy each CPU thread is")));
  EXPECT_TRUE(Json::parse(dlprof::render_json(report)).at("ranks").at(0).at("thread_cpu").at("threads").empty());
}

#if defined(DLPROF_HAS_IMPORT) && DLPROF_HAS_IMPORT

namespace fs = std::filesystem;

// torch.profiler's traces (../shared/reference-traces): the report's numbers are the analyses'.
class ReferenceReportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::is_directory(DLPROF_REFERENCE_TRACES_DIR)) GTEST_SKIP() << "no reference traces at " << DLPROF_REFERENCE_TRACES_DIR;
  }
  static std::vector<dlprof::Trace> read(const std::string& set) {
    return dlprof::read_trace_set({(fs::path(DLPROF_REFERENCE_TRACES_DIR) / set).string()});
  }
  static void expect_analyses_in_json(const std::vector<dlprof::Trace>& traces, bool hta_compat) {
    dlprof::ReportOptions options;
    options.analysis.hta_compat = hta_compat;
    const Json json = Json::parse(dlprof::render_json(dlprof::make_report(traces, options)));
    EXPECT_EQ(json["hta_compat"], hta_compat);
    ASSERT_EQ(json["ranks"].size(), traces.size());
    for (std::size_t i = 0; i < traces.size(); ++i) {
      const Json& rank = json["ranks"][i];
      EXPECT_EQ(rank["rank"], traces[i].distributed.rank);
      const auto temporal = dlprof::analysis::temporal_breakdown(traces[i], options.analysis);
      EXPECT_DOUBLE_EQ(rank["temporal_breakdown"]["idle_us"].get<double>(), static_cast<double>(temporal.idle_ns) / 1e3);
      EXPECT_DOUBLE_EQ(rank["temporal_breakdown"]["compute_us"].get<double>(), static_cast<double>(temporal.compute_ns) / 1e3);
      EXPECT_DOUBLE_EQ(rank["temporal_breakdown"]["non_compute_us"].get<double>(),
                       static_cast<double>(temporal.non_compute_ns) / 1e3);
      EXPECT_DOUBLE_EQ(rank["temporal_breakdown"]["kernel_time_us"].get<double>(),
                       static_cast<double>(temporal.kernel_time_ns) / 1e3);
      EXPECT_DOUBLE_EQ(rank["temporal_breakdown"]["idle_pct"].get<double>(), temporal.idle_percent());
      const auto types = dlprof::analysis::kernel_type_breakdown(traces[i], options.analysis);
      ASSERT_EQ(rank["kernel_type_breakdown"].size(), types.times.size());
      for (std::size_t t = 0; t < types.times.size(); ++t) {
        EXPECT_EQ(rank["kernel_type_breakdown"][t]["type"], types.times[t].label());
        EXPECT_DOUBLE_EQ(rank["kernel_type_breakdown"][t]["time_us"].get<double>(), static_cast<double>(types.times[t].time_ns) / 1e3);
        EXPECT_DOUBLE_EQ(rank["kernel_type_breakdown"][t]["pct"].get<double>(), types.times[t].percent);
      }
      const auto steps = dlprof::analysis::step_breakdown(traces[i]);
      ASSERT_EQ(rank["step_breakdown"].size(), steps.steps.size());
      for (std::size_t s = 0; s < steps.steps.size(); ++s)
        EXPECT_DOUBLE_EQ(rank["step_breakdown"][s]["total_us"].get<double>(), static_cast<double>(steps.steps[s].duration_ns()) / 1e3);
      EXPECT_TRUE(rank["gpu_utilization"].is_number());
    }
    for (const Json& advice : json["recommendations"])
      for (const char* key : {"id", "text", "evidence"}) EXPECT_TRUE(advice[key].is_string()) << key;
  }
};

TEST(ReportTest, HowFarFromTheLimitInTextJsonAndHtml) {
  // The H200 trace dlprof recorded with NVML's clocks (tests/data/h200).
  const dlprof::Report report =
      dlprof::make_report(dlprof::read_trace(std::string(DLPROF_TEST_DATA_DIR) + "/h200/roofline-dlprof.pt.trace.json.gz"));
  const std::string text = unwrapped(dlprof::render_text(report));
  EXPECT_THAT(text, HasSubstr("How far from the limit: each op's kernels against its GPU's roofs, by time lost (10 of 11)"));
  EXPECT_THAT(text, HasSubstr("Model FLOP utilization over the steps: 59.9% ("));
  EXPECT_THAT(text, HasSubstr("; model FLOP utilization 59.9%.")) << "in the verdict, the report's first lines";
  EXPECT_THAT(text, HasSubstr("of BF16's 989.4 TFLOP/s on Tensor Cores)"));
  EXPECT_THAT(text, HasSubstr("GPU 0 (NVIDIA H200): the roofs of the NVIDIA H200 SXM, dense; memory 4.8 TB/s"));
  EXPECT_THAT(text, HasSubstr("GPU 0: SM clock 1559 MHz on average (1515 to 1605, 39 readings), 78.7% of the 1980 MHz its "
                              "peaks are quoted at; held down by the power cap in 100% of the readings"));
  // The gather's index is an expanded view, whose strides dlprof's observer does not record: its
  // figure passes the roof, and is flagged though its row is not among the first ten.
  EXPECT_THAT(text, HasSubstr("aten::gather [[50304, 4096], [], [16384, 4096], [], [16384, 4096]]: 11.07 TB/s is above the "
                              "memory bandwidth of 4.8 TB/s: a counting error"));

  const Json json = Json::parse(dlprof::render_json(report));
  const Json& limits = json.at("ranks").at(0).at("limits");
  EXPECT_NEAR(limits.at("mfu").at("utilization_pct").get<double>(), 59.9, 0.05);
  EXPECT_NEAR(json.at("verdict").at("mfu_pct").get<double>(), 59.9, 0.05);
  EXPECT_EQ(limits.at("mfu").at("precision"), "BF16");
  const Json& mm = limits.at("ops").at(0);
  EXPECT_EQ(mm.at("op"), "aten::mm");
  EXPECT_EQ(mm.at("input_dims"), "[[8192, 8192], [8192, 8192]]");
  EXPECT_EQ(mm.at("calls"), 200);
  EXPECT_NEAR(mm.at("efficiency_pct").get<double>(), 72.04, 0.01);
  EXPECT_NEAR(mm.at("at_clock_pct").get<double>(), 72.04 / (60'795.0 / 39 / 1980), 0.05);
  EXPECT_TRUE(mm.at("mamf_pct").is_null());
  EXPECT_EQ(limits.at("clocks").at(0).at("power_limited_pct"), 100.0);
  EXPECT_EQ(limits.at("clocks").at(0).at("readings"), 39);

  const std::string html = dlprof::render_html(report);
  EXPECT_THAT(html, HasSubstr("<h3>How far from the limit"));
  EXPECT_THAT(html, HasSubstr("a counting error"));
}

TEST(ReportTest, NoRooflineSectionWithoutShapes) {
  // HTA's V100 trace has no record_shapes: nothing to judge, and the section says nothing.
  const dlprof::Report report = dlprof::make_report(dlprof::read_trace(
      std::string(DLPROF_REFERENCE_TRACES_DIR) + "/hta-1rank-v100-resnet-ns/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"));
  EXPECT_THAT(dlprof::render_text(report), Not(HasSubstr("How far from the limit")));
  EXPECT_TRUE(Json::parse(dlprof::render_json(report)).at("ranks").at(0).at("limits").at("mfu").is_null());
}

TEST_F(ReferenceReportTest, TwoRanksWithStragglers) {
  const auto traces = read("hta-2rank-a100-sampled");
  ASSERT_EQ(traces.size(), 2u);
  expect_analyses_in_json(traces, false);
  expect_analyses_in_json(traces, true);
  const dlprof::Report report = dlprof::make_report(traces);
  const Json json = Json::parse(dlprof::render_json(report));
  const Json& stragglers = json["rank_comparison"]["stragglers"];
  ASSERT_EQ(stragglers.size(), 2u);
  EXPECT_EQ(stragglers[0]["step"], 551);
  EXPECT_EQ(stragglers[1]["step"], 552);
  const std::string text = dlprof::render_text(report);
  EXPECT_TRUE(has_line(text, "== Ranks compared =+"));
  EXPECT_TRUE(has_line(text, R"( +551 +2 +[01] +[0-9.]+ +[0-9.]+ +[01] .*)"));
  for (const std::string& line : lines_of(text)) EXPECT_LE(dlprof::detail::text_width(line), 120u) << line;
  const std::string html = dlprof::render_html(report);
  EXPECT_TRUE(well_formed(html));
  EXPECT_TRUE(self_contained(html));
  EXPECT_EQ(count_of(html, "<svg"), 1u + 1u + 2u * 3u);  // the ranks, their NCCL kernels, each rank
  EXPECT_THAT(unwrapped(text), HasSubstr("Straggler: not named: 126 of the world's 128 ranks have no trace here"));
}

// Where a trace's kernels carry External ids that match no op (as DeepSeek's and DLRM's do), the
// ops keep their GPU time: tied by the launch call's nesting, as TensorBoard's plugin ties it.
TEST_F(ReferenceReportTest, OpsKeepTheirGpuTimeWhereExternalIdsMatchNoOp) {
  const auto traces = read("hta-1rank-v100-resnet-ns");
  ASSERT_EQ(traces.size(), 1u);
  dlprof::Trace mismatched = traces[0];
  for (dlprof::GpuEvent& work : mismatched.gpu_events)
    if (work.external_id != 0) work.external_id += 1'000'000'000;
  const dlprof::Report linked = dlprof::make_report(traces[0]);
  const dlprof::Report nested = dlprof::make_report(mismatched);
  ASSERT_FALSE(linked.ranks[0].top_ops_by_gpu.empty());
  ASSERT_EQ(nested.ranks[0].top_ops_by_gpu.size(), linked.ranks[0].top_ops_by_gpu.size());
  for (std::size_t i = 0; i < linked.ranks[0].top_ops_by_gpu.size(); ++i) {
    EXPECT_EQ(nested.ranks[0].top_ops_by_gpu[i].name, linked.ranks[0].top_ops_by_gpu[i].name);
    EXPECT_EQ(nested.ranks[0].top_ops_by_gpu[i].gpu_ns, linked.ranks[0].top_ops_by_gpu[i].gpu_ns)
        << linked.ranks[0].top_ops_by_gpu[i].name;
  }
  EXPECT_EQ(nested.ranks[0].top_ops_by_gpu.front().name, "aten::convolution_backward");
}

TEST_F(ReferenceReportTest, OneRankSets) {
  for (const std::string set : {"hta-1rank-a100-simple-add", "hta-1rank-v100-resnet-ns"}) {
    SCOPED_TRACE(set);
    const auto traces = read(set);
    ASSERT_EQ(traces.size(), 1u);
    expect_analyses_in_json(traces, false);
    expect_analyses_in_json(traces, true);
    const dlprof::Report report = dlprof::make_report(traces);
    EXPECT_FALSE(report.comparison);
    const std::string text = dlprof::render_text(report);
    EXPECT_TRUE(has_line(text, "GPU time \\(HTA temporal breakdown\\)"));
    for (const std::string& line : lines_of(text)) EXPECT_LE(dlprof::detail::text_width(line), 120u) << line;
    const std::string html = dlprof::render_html(report);
    EXPECT_TRUE(well_formed(html));
    EXPECT_TRUE(self_contained(html));
    EXPECT_EQ(count_of(html, "<svg"), 3u);
  }
}

// The verdict and the top actions on every reference trace, reviewed:
// - the A100 "simple add" is one 41 s pass, 91 % of it in launch calls of 43 ms on average (lazy
//   module loading): the host bounds it, and a GPU idle all along is the finding;
// - the V100 ResNet runs float32 convolutions on Volta without Tensor Cores: kernels bound its
//   steps (GPU busy 97 %), and mixed precision (half of 60 ms of eligible kernels) is the action;
// - the two A100 ranks wait on the host (GPU busy 46 %) and overlap little communication;
// - the MI300 BERT step is host-bound (GPU busy 10 %); the Qwen step is GPU-bound, with 24 chains
//   of elementwise kernels (the rotary embeddings' multiplies and adds among them) that fusion
//   would make one kernel each; the vLLM
//   graph replays are GPU-bound with nothing to save above the floors; the MI210 GPU-only trace has
//   no CPU side, so no step;
// - the H100 trace of PyTorch 2.9 is a 1.25 ms step of a quarter GPU busy.
TEST_F(ReferenceReportTest, VerdictAndTopActionsOfEveryReferenceTrace) {
  struct Expected {
    std::string set;
    dlprof::analysis::Bound bound;
    std::vector<std::string> actions;  // the top actions' rule ids
  };
  using dlprof::analysis::Bound;
  const std::vector<Expected> expected = {
      // A first run: first calls (context creation, lazy loading) take 91 % of its one step, so
      // no step is steady and a note asks for a profile after warm-up, not a larger batch.
      {"hta-1rank-a100-simple-add", Bound::Host, {}},
      {"hta-1rank-v100-resnet-ns", Bound::GpuCompute, {"fp32_without_tensor_cores"}},
      // Its float32 GEMMs run off Tensor Cores, where row alignment (N=125, K=110) decides little.
      {"hta-2rank-a100-sampled", Bound::Host, {"low_gpu_utilization", "low_comm_overlap"}},
      {"tracelens-mi210-gpu-only", Bound::NoSteps, {}},
      // BERT inference: 54 of 60 kernels under 10 us, the GPU idle 90 %, 96.5 % of it waiting for
      // the host to launch: a HIP graph, not a larger batch first. Its 141 tokens (M) decide no
      // alignment; the vocabulary's N=30522 does, in too little of the GEMM time to matter.
      {"tracelens-mi300-bert-small", Bound::Host, {"host_bound"}},
      {"tracelens-mi300-qwen1.5-0.5b-chat", Bound::GpuCompute, {"elementwise_chains"}},
      {"tracelens-rocm-vllm-graph-execution", Bound::GpuCompute, {}},
  };
  for (const Expected& set : expected) {
    SCOPED_TRACE(set.set);
    const dlprof::Report report = dlprof::make_report(read(set.set));
    EXPECT_EQ(report.verdict.bound, set.bound);
    std::vector<std::string> actions;
    for (std::size_t i = 0; i < report.verdict.top_actions; ++i) actions.push_back(report.recommendations[i].id);
    EXPECT_EQ(actions, set.actions);
  }
  const dlprof::Report simple_add = dlprof::make_report(read("hta-1rank-a100-simple-add"));
  EXPECT_TRUE(simple_add.verdict.all_flagged);
  ASSERT_EQ(simple_add.verdict.left_out.size(), 1u);
  EXPECT_EQ(simple_add.verdict.left_out[0].step.flag, dlprof::analysis::StepFlag::FirstCalls);
  EXPECT_EQ(simple_add.verdict.left_out[0].step.calls.at(0).name, "cudaDeviceGetStreamPriorityRange");
  ASSERT_EQ(simple_add.recommendations.size(), 1u);
  EXPECT_EQ(simple_add.recommendations[0].id, "first_calls");
  const dlprof::Report h100 =
      dlprof::make_report(dlprof::read_trace_set({std::string(DLPROF_TEST_DATA_DIR) + "/kineto/h100-torch2.9-numeric-versions.pt.trace.json"}));
  EXPECT_EQ(h100.verdict.bound, Bound::Host);
  ASSERT_EQ(h100.verdict.top_actions, 1u);
  EXPECT_EQ(h100.recommendations[0].id, "low_gpu_utilization");
  // The V100 ResNet's saving by hand: half of its 301.247 ms of float32 GEMM/conv kernels over 5
  // steps, of its 95.664 ms median step.
  const dlprof::Report resnet = dlprof::make_report(read("hta-1rank-v100-resnet-ns"));
  const dlprof::analysis::Recommendation& amp = resnet.recommendations.at(0);
  EXPECT_THAT(amp.evidence, HasSubstr("301.247 ms of float32 GEMM/conv kernels"));
  EXPECT_NEAR(amp.impact_ns, 301.247e6 / 5 / 2, 1e3);
  EXPECT_NEAR(resnet.verdict.median_step_ns, 95.664091e6, 1);
  EXPECT_NEAR(amp.share, 100.0 * amp.impact_ns / resnet.verdict.median_step_ns, 1e-9);
}

TEST_F(ReferenceReportTest, RocmOccupancyIsUnknown) {
  // ROCm's kernels carry no `est. achieved occupancy %` and no `blocks per SM`.
  const dlprof::Report report = dlprof::make_report(read("tracelens-mi300-bert-small"));
  const Json json = Json::parse(dlprof::render_json(report));
  ASSERT_EQ(json["ranks"][0]["gpus"].size(), 1u);
  EXPECT_TRUE(json["ranks"][0]["gpus"][0]["achieved_occupancy_pct"].is_null());
  EXPECT_TRUE(json["ranks"][0]["gpus"][0]["sm_efficiency_pct"].is_null());
  EXPECT_TRUE(has_line(dlprof::render_text(report), R"(  [0-9]+ +.* +[0-9.]+% +unknown +unknown +[0-9.]+% +[0-9.]+)"));
}

// --- several windows of one run in one directory ------------------------------------------------
// A Profiler whose schedule repeats writes a file per window with tensorboard_trace_handler; the
// reader gives them back window by window (read_trace_windows), read_trace_set gives the latest,
// and dlprof-report shows the window --window names.

/// The ProfilerStep#N names of a trace.
std::vector<std::string> steps_of(const dlprof::Trace& trace) {
  std::vector<std::string> steps;
  for (const dlprof::TraceEvent& event : trace.events)
    if (event.kind == dlprof::EventKind::Step) steps.emplace_back(trace.name_of(event));
  return steps;
}

/// A Profiler recording steps 0, 1 and 2 as three windows of one step each, written to `dir`.
void record_three_windows(const fs::path& dir) {
  dlprof::Profiler prof(dlprof::ProfilerOptions{}
                            .schedule(dlprof::schedule(/*wait=*/0, /*warmup=*/0, /*active=*/1, /*repeat=*/3))
                            .on_trace_ready(dlprof::tensorboard_trace_handler(dir.string(), "worker0")));
  prof.start();
  for (int step = 0; step < 4; ++step) {
    { DLPROF_RANGE("trace_windows_work"); }
    prof.step();
  }
  prof.stop();
  ASSERT_THAT(prof.errors(), ::testing::IsEmpty());
}

TEST(TraceWindowsTest, ARepeatingScheduleReadsBackWindowByWindow) {
  const dlprof_test::TempDir tmp;
  const fs::path dir = tmp.path() / "run";
  record_three_windows(dir);
  ASSERT_EQ(dlprof::trace_set_files({dir.string()}).size(), 3u) << "one file per window";

  const std::vector<std::vector<dlprof::Trace>> windows = dlprof::read_trace_windows({dir.string()});
  ASSERT_EQ(windows.size(), 3u);
  for (std::size_t k = 0; k < windows.size(); ++k) {
    SCOPED_TRACE(k);
    ASSERT_EQ(windows[k].size(), 1u);
    EXPECT_EQ(windows[k][0].distributed.rank, 0);
    EXPECT_EQ(steps_of(windows[k][0]), std::vector<std::string>{fmt::format("ProfilerStep#{}", k)});
    EXPECT_THAT(windows[k][0].read_result.notes, ::testing::IsEmpty());
    if (k > 0) {
      EXPECT_GE(windows[k][0].window_start_ns, windows[k - 1][0].window_end_ns);
    }
  }

  const std::vector<dlprof::Trace> latest = dlprof::read_trace_set({dir.string()});
  ASSERT_EQ(latest.size(), 1u);
  EXPECT_EQ(steps_of(latest[0]), std::vector<std::string>{"ProfilerStep#2"});
  EXPECT_THAT(latest[0].read_result.notes, ::testing::ElementsAre(HasSubstr("window 3 of 3, the latest")));
}

// Read with a summarizer, a run is never held whole: each file is summarized as soon as it is
// read, before the next is read, and the windows and notes are read_trace_windows()'s.
TEST(TraceWindowsTest, ASummarizingReadHoldsOneTraceAtATime) {
  const dlprof_test::TempDir tmp;
  const fs::path dir = tmp.path() / "run";
  fs::create_directories(dir);
  const std::vector<dlprof::Trace> traces = two_ranks_with_collectives();
  for (const dlprof::Trace& trace : traces) dlprof::save_chrome_trace(trace, (dir / fmt::format("rank{}.pt.trace.json", trace.distributed.rank)).string());
  std::ofstream(dir / "config.json") << R"({"lr": 0.1})";

  std::vector<std::string> order;
  dlprof::ReadOptions options;
  options.progress = [&](const dlprof::ReadProgress& progress) {
    const std::string read = fmt::format("read file {}", progress.file_index);
    if (progress.bytes_done == progress.bytes_total && (order.empty() || order.back() != read)) order.push_back(read);
  };
  const auto windows = dlprof::read_trace_windows({dir.string()}, options, [&](dlprof::Trace&& trace) {
    order.push_back(fmt::format("summarized rank {}", trace.distributed.rank));
    return dlprof::analyse_rank(std::move(trace));
  });
  EXPECT_THAT(order, ::testing::ElementsAre("read file 0", "read file 1", "summarized rank 0", "read file 2",
                                            "summarized rank 1"))
      << "config.json (file 0) is no trace; each rank's file is summarized before the next is read";
  ASSERT_EQ(windows.size(), 1u);
  ASSERT_EQ(windows[0].ranks.size(), 2u);
  EXPECT_EQ(windows[0].ranks[0].report.rank, 0);
  EXPECT_EQ(windows[0].ranks[1].report.rank, 1);
  EXPECT_THAT(windows[0].notes, ::testing::ElementsAre(HasSubstr("config.json' left out of the set")));

  std::vector<dlprof::AnalysedRank> ranks = windows[0].ranks;
  const std::vector<dlprof::Trace> whole = dlprof::read_trace_set({dir.string()});
  std::vector<std::string>& notes = ranks.front().report.read.notes;
  notes.insert(notes.end(), windows[0].notes.begin(), windows[0].notes.end());
  EXPECT_EQ(dlprof::render_json(dlprof::make_report(std::move(ranks))), dlprof::render_json(dlprof::make_report(whole)));
}

#ifdef DLPROF_REPORT_CLI
/// What a command printed (stdout and stderr) and its exit status.
struct CommandResult {
  std::string output;
  int status = -1;
};

CommandResult run_report(const std::string& arguments) {
  const std::string command = fmt::format("'{}' {} 2>&1", DLPROF_REPORT_CLI, arguments);
  CommandResult result;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (pipe == nullptr) return result;
  char chunk[4096];
  for (std::size_t count; (count = std::fread(chunk, 1, sizeof(chunk), pipe)) > 0;) result.output.append(chunk, count);
  const int status = ::pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

/// The steps and the title of dlprof-report's JSON report.
struct ReportedWindow {
  std::string title;
  std::vector<std::string> steps;
};

ReportedWindow reported(const CommandResult& result) {
  const nlohmann::json report = nlohmann::json::parse(result.output);
  ReportedWindow window;
  window.title = report.at("title").get<std::string>();
  for (const nlohmann::json& step : report.at("ranks").at(0).at("step_breakdown"))
    window.steps.push_back(step.at("step").get<std::string>());
  return window;
}

TEST(TraceWindowsTest, ReportShowsTheWindowItIsAskedFor) {
  const dlprof_test::TempDir tmp;
  const fs::path dir = tmp.path() / "run";
  record_three_windows(dir);
  const std::string quoted_dir = fmt::format("'{}'", dir.string());

  const CommandResult latest = run_report("--format json " + quoted_dir);
  ASSERT_EQ(latest.status, 0) << latest.output;
  EXPECT_EQ(reported(latest).title, dir.string() + " (window 3 of 3)");
  EXPECT_EQ(reported(latest).steps, std::vector<std::string>{"ProfilerStep#2"});
  EXPECT_EQ(run_report("--format json --window last " + quoted_dir).output, latest.output);

  const CommandResult first = run_report("--format json --window 1 --rank 0 " + quoted_dir);
  ASSERT_EQ(first.status, 0) << first.output;
  EXPECT_EQ(reported(first).title, dir.string() + " (window 1 of 3, rank 0)");
  EXPECT_EQ(reported(first).steps, std::vector<std::string>{"ProfilerStep#0"});

  const CommandResult text = run_report("--window=2 " + quoted_dir);
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr(fmt::format("dlprof report: {} (window 2 of 3)\n", dir.string())));
  EXPECT_THAT(text.output, HasSubstr("ProfilerStep#1"));

  const CommandResult beyond = run_report("--window 4 " + quoted_dir);
  EXPECT_EQ(beyond.status, 2);
  EXPECT_EQ(beyond.output, fmt::format("dlprof-report: --window 4: '{}' holds 3 windows (each rank's trace files, in time "
                                       "order): choose 1 to 3, or last\nTry 'dlprof-report --help'.\n",
                                       dir.string()));
}

const std::string kH200Torch = std::string(DLPROF_TEST_DATA_DIR) + "/h200/roofline-torch.pt.trace.json.gz";

TEST(ReportCliTest, TheKernelTableInCsvJsonTextAndHtml) {
  const CommandResult csv = run_report("--kernels --format csv '" + kH200Torch + "'");
  ASSERT_EQ(csv.status, 0) << csv.output;
  const std::vector<std::string> lines = lines_of(csv.output);
  ASSERT_EQ(lines.size(), 15u) << "a header and the trace's 14 kernel rows";
  EXPECT_EQ(lines[0].rfind("rank,layer,op,line,direction,input_dims,input_types,precision,matrix_units,kernel,grid,block,", 0), 0u);
  EXPECT_EQ(lines[1].rfind(R"(0,"","aten::mm","","fwd","[[8192, 8192], [8192, 8192]]","[""c10::BFloat16"", ""c10::BFloat16""]","BF16",true,"nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT",)", 0), 0u)
      << lines[1];
  EXPECT_THAT(lines[1], HasSubstr(",200,311406.330,219902325555200,80530636800,"));

  const CommandResult json = run_report("--kernels --format json '" + kH200Torch + "'");
  ASSERT_EQ(json.status, 0) << json.output;
  const Json table = Json::parse(json.output);
  const Json& top = table.at("ranks").at(0).at("kernels").at(0);
  EXPECT_EQ(top.at("kernel"), "nvjet_sm90_tst_320x128_64x3_1x2_h_bz_coopB_NNT");
  EXPECT_EQ(top.at("calls"), 200);
  EXPECT_TRUE(top.at("line").is_null()) << "no call stacks";
  EXPECT_EQ(top.at("precision"), "BF16");
  EXPECT_EQ(top.at("bound"), "compute");
  EXPECT_NEAR(top.at("efficiency_pct").get<double>(), 100 * 219902325555200.0 / 311406330 / 1e3 / 989.4, 1e-6);
  EXPECT_EQ(table.at("ranks").at(0).at("kernels").size(), 14u);

  const CommandResult text = run_report("--kernels --top 3 '" + kH200Torch + "'");
  ASSERT_EQ(text.status, 0) << text.output;
  EXPECT_THAT(text.output, HasSubstr("Rank 0: kernels by time lost against the roofline"));
  EXPECT_THAT(text.output, HasSubstr("... 11 more (--top N shows N)"));
  EXPECT_THAT(text.output, HasSubstr("BF16 TC"));

  const CommandResult html = run_report("--kernels --format html '" + kH200Torch + "'");
  ASSERT_EQ(html.status, 0) << html.output;
  EXPECT_EQ(html.output.rfind("<!DOCTYPE html>", 0), 0u);
  EXPECT_EQ(count_of(html.output, "<tr>"), 15u);
}

TEST(ReportCliTest, PeaksGivenInlineOrInAFileReplaceTheTablesAndBadOnesAreRefused) {
  const CommandResult inline_peaks = run_report("--format json --peaks 'bf16=500, tf32=250, fp32=67, memory=4.8' '" + kH200Torch + "'");
  ASSERT_EQ(inline_peaks.status, 0) << inline_peaks.output;
  const Json limits = Json::parse(inline_peaks.output).at("ranks").at(0).at("limits");
  EXPECT_EQ(limits.at("devices").at(0).at("peaks"), "the peaks given");
  EXPECT_EQ(limits.at("ops").at(0).at("peak_tflops"), 500);
  EXPECT_EQ(limits.at("mfu").at("peak_tflops"), 500);

  const dlprof_test::TempDir tmp;
  const fs::path file = tmp.path() / "peaks.txt";
  std::ofstream(file) << "# half an H200\nbf16=494.7\ntf32=247.4\nfp32=33.5\nmemory=2.4\n";
  const CommandResult from_file = run_report("--format json --peaks '" + file.string() + "' '" + kH200Torch + "'");
  ASSERT_EQ(from_file.status, 0) << from_file.output;
  EXPECT_EQ(Json::parse(from_file.output).at("ranks").at(0).at("limits").at("ops").at(0).at("peak_tflops"), 494.7);

  const CommandResult bad = run_report("--peaks 'bf16=989, memory=3.35, sparse=1979' '" + kH200Torch + "'");
  EXPECT_EQ(bad.status, 2);
  EXPECT_THAT(bad.output, HasSubstr("dlprof-report: --peaks: unknown key 'sparse'"));
  const CommandResult missing = run_report("--peaks '" + (tmp.path() / "none.txt").string() + "' '" + kH200Torch + "'");
  EXPECT_EQ(missing.status, 2);
  EXPECT_THAT(missing.output, HasSubstr("no key=value pairs, and no file to read them from: No such file or directory"));
  const CommandResult csv_report = run_report("--format csv '" + kH200Torch + "'");
  EXPECT_EQ(csv_report.status, 2);
  EXPECT_THAT(csv_report.output, HasSubstr("--format csv is the kernel table's: add --kernels"));
}
#endif

#endif  // DLPROF_HAS_IMPORT

}  // namespace
