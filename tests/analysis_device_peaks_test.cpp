// The roofs: every reference trace's GPU is found in the table by what its deviceProperties say,
// the figures are dense ones (never the 2:4-sparse), and the table's rows agree with themselves
// the way the hardware does (TF32 at half BF16's rate, FP8 at twice it); the peaks a user gives
// are read, or refused with their fault.
#include <dlprof/analysis/device_peaks.hpp>
#include <dlprof/import/chrome_trace.hpp>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <string_view>

namespace device_peaks_test {

using dlprof::DeviceProperties;
using dlprof::analysis::find_device_peaks;
using dlprof::analysis::Precision;

DeviceProperties device(std::string name, int major, int minor, int sms, double gib) {
  DeviceProperties properties;
  properties.name = std::move(name);
  properties.compute_major = major;
  properties.compute_minor = minor;
  properties.num_sms = sms;
  properties.total_global_mem = static_cast<std::int64_t>(gib * 1024 * 1024 * 1024);
  return properties;
}

std::string model_of(const DeviceProperties& properties) {
  const auto* peaks = find_device_peaks(properties);
  return peaks != nullptr ? std::string(peaks->model) : "unknown";
}

TEST(DevicePeaksTest, TheReferenceTracesGpusAreFoundByWhatTorchProfilerWritesOfThem) {
  const std::map<std::string, std::string> expected = {
      {"hta-1rank-a100-simple-add", "NVIDIA A100 SXM4 40GB"},   // "NVIDIA A100-PG509-200", 39.4 GiB
      {"tracelens-mi210-gpu-only", "AMD Instinct MI210"},
      {"tracelens-mi300-bert-small", "AMD Instinct MI300X"},     // "AMD Instinct MI300X VF"
      {"tracelens-mi300-qwen1.5-0.5b-chat", "AMD Instinct MI300X"},
      {"tracelens-rocm-vllm-graph-execution", "AMD Instinct MI300X"},  // no name: gfx942, 304 CUs, 192 GiB
  };
  for (const auto& [set, model] : expected) {
    SCOPED_TRACE(set);
    const std::filesystem::path dir = std::filesystem::path(DLPROF_REFERENCE_TRACES_DIR) / set;
    const dlprof::Trace trace = dlprof::read_trace(std::filesystem::directory_iterator(dir)->path().string());
    ASSERT_FALSE(trace.devices.empty());
    EXPECT_EQ(model_of(trace.devices.front()), model);
  }
  const dlprof::Trace h200 = dlprof::read_trace(std::string(DLPROF_TEST_DATA_DIR) + "/h200/roofline-dlprof.pt.trace.json.gz");
  ASSERT_FALSE(h200.devices.empty());
  EXPECT_EQ(model_of(h200.devices.front()), "NVIDIA H200 SXM");
}

TEST(DevicePeaksTest, NamesVariantsAndNamelessDevicesAreTold) {
  // The V100 reference trace's device, without reading its 69,000 events.
  EXPECT_EQ(model_of(device("Tesla V100-SXM2-32GB", 7, 0, 80, 31.7)), "NVIDIA Tesla V100 SXM2");
  EXPECT_EQ(model_of(device("Tesla V100-PCIE-16GB", 7, 0, 80, 15.8)), "NVIDIA Tesla V100 PCIe");
  EXPECT_EQ(model_of(device("NVIDIA H100 80GB HBM3", 9, 0, 132, 79.1)), "NVIDIA H100 SXM5");
  EXPECT_EQ(model_of(device("NVIDIA H100 PCIe", 9, 0, 114, 79.1)), "NVIDIA H100 PCIe");
  EXPECT_EQ(model_of(device("NVIDIA A100-SXM4-80GB", 8, 0, 108, 79.2)), "NVIDIA A100 SXM4 80GB");
  EXPECT_EQ(model_of(device("NVIDIA A100 80GB PCIe", 8, 0, 108, 79.2)), "NVIDIA A100 PCIe 80GB");
  EXPECT_EQ(model_of(device("NVIDIA GH200 480GB", 9, 0, 132, 94.5)), "NVIDIA GH200 (96 GB HBM3)");
  EXPECT_EQ(model_of(device("NVIDIA GH200 144G HBM3e", 9, 0, 132, 139.8)), "NVIDIA GH200 (144 GB HBM3e)");
  EXPECT_EQ(model_of(device("NVIDIA H200 NVL", 9, 0, 132, 139.8)), "NVIDIA H200 NVL");
  EXPECT_EQ(model_of(device("NVIDIA B200", 10, 0, 148, 178.4)), "NVIDIA B200");
  EXPECT_EQ(model_of(device("NVIDIA L4", 8, 9, 58, 22.0)), "NVIDIA L4");
  EXPECT_EQ(model_of(device("Tesla T4", 7, 5, 40, 14.6)), "NVIDIA T4");
  EXPECT_EQ(model_of(device("AMD Instinct MI250X / MI250", 9, 0, 110, 64)), "AMD Instinct MI250X (one GCD)");
  EXPECT_EQ(model_of(device("AMD Instinct MI250X / MI250", 9, 0, 104, 64)), "AMD Instinct MI250 (one GCD)");
  EXPECT_EQ(model_of(device("AMD Instinct MI325X", 9, 4, 304, 256)), "AMD Instinct MI325X");
  EXPECT_EQ(model_of(device("", 9, 4, 304, 256)), "AMD Instinct MI325X");
  EXPECT_EQ(model_of(device("", 9, 4, 304, 192)), "AMD Instinct MI300X");
  EXPECT_EQ(model_of(device("NVIDIA GeForce RTX 4090", 8, 9, 128, 24)), "unknown");
  EXPECT_EQ(model_of(device("NVIDIA H100 NVL", 9, 0, 132, 93.1)), "unknown");
  EXPECT_EQ(model_of(device("", 8, 0, 108, 40)), "unknown");
}

TEST(DevicePeaksTest, PeaksAreDenseNeverTheSparseFigures) {
  const auto* h100 = find_device_peaks(device("NVIDIA H100 80GB HBM3", 9, 0, 132, 79.1));
  ASSERT_NE(h100, nullptr);
  EXPECT_EQ(h100->matrix_peak(Precision::BF16), 989.4);  // the datasheet's 1,979 is with sparsity
  EXPECT_EQ(h100->mamf_bf16, 794.5);
  EXPECT_EQ(h100->memory_tb_per_s, 3.35);
  const auto* b200 = find_device_peaks(device("NVIDIA B200", 10, 0, 148, 178.4));
  ASSERT_NE(b200, nullptr);
  EXPECT_EQ(b200->matrix_peak(Precision::BF16), 2250);
  EXPECT_EQ(b200->mamf_bf16, 1745);
  const auto* mi300x = find_device_peaks(device("AMD Instinct MI300X", 9, 4, 304, 192));
  ASSERT_NE(mi300x, nullptr);
  EXPECT_EQ(mi300x->matrix_peak(Precision::BF16), 1307.4);
  EXPECT_EQ(mi300x->mamf_bf16, 668);
  EXPECT_EQ(mi300x->memory_tb_per_s, 5.3);
}

TEST(DevicePeaksTest, EveryRowAgreesWithItselfAsTheHardwareDoes) {
  for (const dlprof::analysis::DevicePeaks& row : dlprof::analysis::detail::kDevicePeaks) {
    SCOPED_TRACE(std::string(row.model));
    EXPECT_FALSE(row.source.empty());
    EXPECT_GT(row.memory_tb_per_s, 0);
    const double bf16 = row.matrix_peak(Precision::BF16);
    const double fp16 = row.matrix_peak(Precision::FP16);
    EXPECT_GT(fp16, 0) << "every GPU here has FP16 matrix units";
    if (bf16 > 0) {
      EXPECT_EQ(bf16, fp16);
    }
    if (row.matrix_peak(Precision::TF32) > 0) {
      EXPECT_NEAR(row.matrix_peak(Precision::TF32), fp16 / 2, 0.01 * fp16);
    }
    if (row.matrix_peak(Precision::FP8) > 0) {
      EXPECT_NEAR(row.matrix_peak(Precision::FP8), fp16 * 2, 0.01 * fp16);
    }
    EXPECT_GT(fp16, row.vector_peak(Precision::FP32)) << "matrix units outrun the vector units";
    if (row.mamf_bf16 > 0) {
      EXPECT_LT(row.mamf_bf16, bf16) << "a measured rate below the peak";
    }
  }
}

TEST(DevicePeaksTest, EveryRowHasTheLastLevelCacheOfItsDieButTheB200s) {
  for (const dlprof::analysis::DevicePeaks& row : dlprof::analysis::detail::kDevicePeaks) {
    SCOPED_TRACE(std::string(row.model));
    if (row.model == "NVIDIA B200") {
      EXPECT_EQ(row.cache_mb, 0) << "NVIDIA publishes no L2 size for the B200";
    } else {
      EXPECT_GE(row.cache_mb, 4);
    }
  }
  DeviceProperties h200;
  h200.name = "NVIDIA H200";
  h200.compute_major = 9;
  EXPECT_EQ(find_device_peaks(h200)->cache_mb, 50);
}

TEST(DevicePeaksTest, PeaksAUserGivesAreReadWithEachUnitAndRefusedWithTheirFault) {
  const auto peaks = dlprof::analysis::parse_device_peaks(
      "# an RTX 4090, dense\nbf16=165.2, fp16 = 165.2\ntf32=82.6\nfp32=82.6  # the CUDA cores\n"
      "vector.fp16=82.6, matrix.int8=660.6, memory=1.008, boost_mhz=2520, cache_mb=72, mamf=150\n");
  EXPECT_EQ(peaks.matrix_peak(Precision::BF16), 165.2);
  EXPECT_EQ(peaks.matrix_peak(Precision::FP16), 165.2);
  EXPECT_EQ(peaks.matrix_peak(Precision::TF32), 82.6);
  EXPECT_EQ(peaks.matrix_peak(Precision::FP32), 0);
  EXPECT_EQ(peaks.vector_peak(Precision::FP32), 82.6);
  EXPECT_EQ(peaks.vector_peak(Precision::FP16), 82.6);
  EXPECT_EQ(peaks.matrix_peak(Precision::INT8), 660.6);
  EXPECT_EQ(peaks.memory_tb_per_s, 1.008);
  EXPECT_EQ(peaks.boost_mhz, 2520);
  EXPECT_EQ(peaks.cache_mb, 72);
  EXPECT_EQ(peaks.mamf_bf16, 150);
  EXPECT_EQ(dlprof::analysis::parse_device_peaks("matrix.fp32=163.4,memory=5.3").matrix_peak(Precision::FP32), 163.4);

  const auto refused = [](std::string_view text) {
    try {
      dlprof::analysis::parse_device_peaks(text);
    } catch (const std::invalid_argument& error) {
      return std::string(error.what());
    }
    return std::string("accepted");
  };
  EXPECT_EQ(refused("bf16=989"), "peaks: no memory bandwidth (memory=TB/s) is given");
  EXPECT_EQ(refused("memory=3.35"), "peaks: no FLOP peak (e.g. bf16=TFLOP/s) is given");
  EXPECT_EQ(refused("bf16=989, memory=3.35, bf16=900"), "peaks: 'bf16' is given twice");
  EXPECT_EQ(refused("bf16=fast, memory=3.35"), "peaks: the value of 'bf16' is no number of 0 or more: 'fast'");
  EXPECT_EQ(refused("bf16=-1, memory=3.35"), "peaks: the value of 'bf16' is no number of 0 or more: '-1'");
  EXPECT_EQ(refused("bf16=inf, memory=3.35"), "peaks: the value of 'bf16' is no number of 0 or more: 'inf'");
  EXPECT_EQ(refused("bf16 989, memory=3.35"), "peaks: 'bf16 989' is no key=value pair");
  EXPECT_THAT(refused("bf16=989, memory=3.35, sparse.fp8=4000"), testing::StartsWith("peaks: unknown key 'sparse.fp8'"));
}

}  // namespace device_peaks_test
