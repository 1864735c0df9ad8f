// comm-profile's driver (tools/comm-profile): the sweep plan and the reports (sizes, table, CSV,
// JSON and the comm-profile file), and measure()'s sweep over real Gloo process
// groups, one thread per rank on loopback.
#include "comm-profile/driver.hpp"
#include "comm-profile/report.hpp"
#include "base/error.hpp"
#include "support/gloo_ranks.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <map>
#include <mutex>

using namespace acc::app;
using acc::comm::ProcessGroupCollectives;
using acc::perf::Collective;
using acc::test::expect_all_ok;
using acc::test::gloo_ranks;

TEST(Report, ParsesSizesWithBinarySuffixes) {
    EXPECT_EQ(parse_size("8", "-b"), 8);
    EXPECT_EQ(parse_size("4K", "-b"), 4096);
    EXPECT_EQ(parse_size("64M", "-e"), 64 << 20);
    EXPECT_EQ(parse_size("1g", "-e"), std::int64_t{1} << 30);
    for (const char* bad : {"", "M", "1.5M", "-8", "8KB", "0x10"})
        EXPECT_THROW(parse_size(bad, "-b"), acc::UsageError) << bad;
    EXPECT_EQ(size_text(64 << 20), "64 MiB");
    EXPECT_EQ(size_text(1536), "1.5 KiB");
}

TEST(Report, PlansSizesAsNcclTestsDoes) {
    SweepPlan plan;
    plan.min_bytes = 8;
    plan.max_bytes = 100;
    plan.factor = 2;
    // 8, 16, 32, 64 bytes; 128 > 100.
    EXPECT_EQ(plan_counts(Collective::allreduce, plan, 4), (std::vector<std::int64_t>{2, 4, 8, 16}));
    // allgather: per-rank parts of size/4/world floats, at least one; 8 and 16 both round to 1.
    EXPECT_EQ(plan_counts(Collective::allgather, plan, 4), (std::vector<std::int64_t>{1, 2, 4}));
    EXPECT_EQ(collective_bytes(Collective::allgather, 4, 4), 64);
    EXPECT_EQ(collective_bytes(Collective::reduce_scatter, 4, 4), 64);
    EXPECT_EQ(collective_bytes(Collective::broadcast, 4, 4), 16);
    plan.factor = 10;
    plan.max_bytes = std::int64_t{1} << 40;  // stops before overflowing
    EXPECT_EQ(plan_counts(Collective::allreduce, plan, 2).size(), 12u);
}

TEST(Report, ValidatesThePlan) {
    ProfileConfig config;
    config.min_bytes = "1M";
    config.max_bytes = "1K";
    try {
        make_plan(config);
        FAIL();
    } catch (const acc::UsageError& e) {
        EXPECT_STREQ(e.what(), "-e/--max-bytes 1024 is smaller than -b/--min-bytes 1048576");
    }
    ProfileConfig unknown;
    unknown.collectives = {"allreduce", "gather"};
    EXPECT_THROW(make_plan(unknown), acc::UsageError);
    ProfileConfig twice;
    twice.collectives = {"broadcast", "broadcast"};
    EXPECT_THROW(make_plan(twice), acc::UsageError);
    SweepPlan none_back_to_back;
    none_back_to_back.agg_iters = 0;
    EXPECT_EQ(acc::test::error_of([&] { none_back_to_back.validate(); }), "-m/--agg-iters: must be at least 1");
    // Ranks that time different numbers of calls per iteration measure differently.
    SweepPlan one, four;
    four.agg_iters = 4;
    EXPECT_NE(one.signature(), four.signature());
}

TEST(Report, NumbersFitTheirColumns) {
    EXPECT_EQ(fit_number(12.345, 10), "12.35");
    EXPECT_EQ(fit_number(1234567.8, 10), "1234567.80");
    EXPECT_EQ(fit_number(12345678.9, 10), "12345678.9");
    EXPECT_EQ(fit_number(1234567890.1, 10), "1234567890");
    EXPECT_EQ(fit_number(123456789012.0, 10), "1.2346e+11");
}

TEST(Report, TableRowsLineUpWithTheHeader) {
    SizeResult row;
    row.size = 1048576;
    row.count = 262144;
    row.time = acc::perf::summarize({100e-6, 200e-6, 400e-6});
    set_bandwidths(row, Collective::allreduce, 4);
    EXPECT_DOUBLE_EQ(row.algbw, 1048576 / 200e-6);
    EXPECT_DOUBLE_EQ(row.busbw, row.algbw * 1.5);
    const std::string header = table_header(Collective::allreduce);
    const std::string line = table_row(row);
    const std::string columns =
        header.substr(header.find('\n') + 1, header.find('\n', header.find('\n') + 1) - header.find('\n'));
    EXPECT_EQ(line.size(), columns.size());
    EXPECT_EQ(line,
              "     1048576      262144   float     100.00     200.00     400.00     233.33       5.24       7.86       -\n");
    row.wrong = 3;
    EXPECT_EQ(table_row(row).substr(line.size() - 4), "  3\n");
}

TEST(Report, CsvJsonAndFileAgree) {
    CollectiveResult r;
    r.collective = Collective::allgather;
    r.bus_factor = 0.5;
    for (std::int64_t size : {1024, 4096, 16384}) {
        SizeResult row;
        row.size = size;
        row.count = size / 8;
        const double t = 10e-6 + static_cast<double>(size) / 1e9;
        row.time = acc::perf::summarize({t, t, t});
        set_bandwidths(row, Collective::allgather, 2);
        row.wrong = 0;
        r.rows.push_back(row);
    }
    fit_rows(r);
    EXPECT_NEAR(r.fit.alpha, 10e-6, 1e-12);
    EXPECT_NEAR(r.fit.bandwidth, 1e9, 1);
    ProfileMeta meta;
    meta.world_size = 2;
    meta.hosts = {"h", "h"};
    std::vector<CollectiveResult> results{r};

    const std::string csv = results_csv(results);
    EXPECT_EQ(csv.substr(0, csv.find('\n')),
              "collective,size_bytes,count,type,time_min_s,time_median_s,time_max_s,time_mean_s,algbw_Bps,busbw_Bps,wrong");
    EXPECT_NE(csv.find("\nallgather,4096,512,float32,1.4096e-05,1.4096e-05,1.4096e-05,"), std::string::npos);

    auto json = nlohmann::json::parse(results_json(results, meta));
    EXPECT_EQ(json["world_size"], 2);
    EXPECT_EQ(json["collectives"][0]["name"], "allgather");
    EXPECT_EQ(json["collectives"][0]["results"][2]["size"], 16384);
    EXPECT_NEAR(json["collectives"][0]["fit"]["bus_bandwidth_Bps"].get<double>(), 0.5e9, 1);
    EXPECT_EQ(json["wrong"], 0);

    acc::io::CommProfile p = to_comm_profile(results, meta);
    ASSERT_EQ(p.collectives.size(), 1u);
    EXPECT_EQ(p.collectives[0].name, "allgather");
    EXPECT_EQ(p.collectives[0].size, (std::vector<std::int64_t>{1024, 4096, 16384}));
    EXPECT_DOUBLE_EQ(p.collectives[0].bus_bandwidth, r.fit.bandwidth * 0.5);
    EXPECT_EQ(p.collectives[0].fit_points, 3);

    // One rank: bus factor 0, and a time that does not grow gives an unbounded bandwidth.
    CollectiveResult lone = r;
    lone.bus_factor = 0;
    for (auto& row : lone.rows) row.time = acc::perf::summarize({5e-6});
    fit_rows(lone);
    EXPECT_TRUE(std::isinf(lone.fit.bandwidth));
    EXPECT_EQ(fit_bus_bandwidth(lone), 0);
    EXPECT_EQ(to_comm_profile({lone}, meta).collectives[0].bus_bandwidth, 0);
    // JSON has no infinity: the unbounded bandwidth is null.
    auto lone_json = nlohmann::json::parse(results_json({lone}, meta));
    EXPECT_TRUE(lone_json["collectives"][0]["fit"]["bandwidth_Bps"].is_null());
    EXPECT_EQ(lone_json["backend"], "gloo");
    EXPECT_EQ(lone_json["device"], "cpu");
}

// Past a burst the latency is the median of the small sizes' mean times: calls whose
// time is bimodal put each size's median on one mode, while a step pays their mean.
TEST(Report, LatencyPastTheBurstComesFromTheSmallSizesMeanTimes) {
    CollectiveResult r;
    r.collective = Collective::allreduce;
    const std::vector<std::vector<double>> small = {
        {0.2e-3, 0.2e-3, 4e-3}, {0.2e-3, 4e-3, 4e-3}, {0.2e-3, 0.2e-3, 0.2e-3}, {0.2e-3, 0.2e-3, 4e-3}};
    std::int64_t size = 8;
    for (const auto& times : small) {
        SizeResult row;
        row.size = size;
        row.count = 2;
        row.time = acc::perf::summarize(times);
        r.rows.push_back(row);
        size *= 8;
    }
    for (std::int64_t big : {1 << 20, 4 << 20}) {
        SizeResult row;
        row.size = big;
        row.count = big / 4;
        const double t = 1e-3 + static_cast<double>(big) / 1e7;
        row.time = acc::perf::summarize({t, t, t});
        r.rows.push_back(row);
    }
    fit_rows(r, 1 << 20);
    EXPECT_EQ(r.fit.latency_points, 4u);
    // Means 1.467, 2.733, 0.2 and 1.467 ms (medians 0.2, 4, 0.2, 0.2): the median of the means.
    EXPECT_NEAR(r.fit.alpha, 4.4e-3 / 3, 1e-12);
    EXPECT_NEAR(r.fit.bandwidth, 1e7, 1e-3);
    EXPECT_NE(fit_line(r).find("alpha the median of the 4 smaller sizes' mean times"), std::string::npos);
}

// Everything comm-profile reports of a collective comes from its table entry.
TEST(Report, EveryCollectiveOfTheTableHasItsReport) {
    ASSERT_EQ(acc::perf::collective_table().size(), acc::perf::all_collectives().size());
    for (const acc::perf::CollectiveInfo& c : acc::perf::collective_table()) {
        EXPECT_EQ(acc::perf::parse_collective(c.name), c.kind);
        EXPECT_NE(table_header(c.kind).find(std::string("# ") + c.name + " (" + c.detail + ")\n"), std::string::npos);
        EXPECT_EQ(collective_bytes(c.kind, 3, 4), c.size_counts_ranks ? 48 : 12) << c.name;
    }
}

TEST(CommProfile, MeasuresAndChecksASmallSweep) {
    std::mutex mutex;
    std::vector<CollectiveResult> seen;
    expect_all_ok(gloo_ranks(2, [&](ProcessGroupCollectives& comm) {
        SweepPlan plan;
        plan.min_bytes = 8;
        plan.max_bytes = 64 << 10;
        plan.factor = 8;
        plan.iterations = 3;
        plan.warmup = 1;
        plan.check = true;
        auto results = measure(comm, plan);
        if (comm.rank() == 0) {
            std::lock_guard<std::mutex> lock(mutex);
            seen = results;
        }
    }));
    ASSERT_EQ(seen.size(), 3u);
    for (const auto& r : seen) {
        ASSERT_EQ(r.rows.size(), 5u) << acc::perf::collective_name(r.collective);  // 8 B .. 32 KiB by 8
        for (const auto& row : r.rows) {
            EXPECT_EQ(row.wrong, 0);
            EXPECT_LE(row.time.min, row.time.median);
            EXPECT_LE(row.time.median, row.time.max);
            EXPECT_DOUBLE_EQ(row.busbw, row.algbw * r.bus_factor);
        }
        EXPECT_EQ(r.rows.back().size, 32768);
        EXPECT_EQ(r.fit.points, 5u);
    }
}

// With -m K, each timed iteration issues K calls back to back: K - 1 more per
// timed iteration than with -m 1, the rest of the sweep (warm-up, barriers, the
// slowest rank's gathering) unchanged; the times stay per call.
TEST(CommProfile, AggItersIssuesTheCallsBackToBack) {
    std::mutex mutex;
    std::map<int, std::int64_t> calls;
    std::map<int, CollectiveResult> seen;
    for (int agg : {1, 4}) {
        expect_all_ok(gloo_ranks(2, [&](ProcessGroupCollectives& comm) {
            SweepPlan plan;
            plan.collectives = {Collective::allreduce};
            plan.min_bytes = 8;
            plan.max_bytes = 64;
            plan.factor = 8;  // 8 and 64 bytes
            plan.iterations = 3;
            plan.warmup = 1;
            plan.agg_iters = agg;
            comm.reset_traffic();
            auto results = measure(comm, plan);
            if (comm.rank() == 0) {
                std::lock_guard<std::mutex> lock(mutex);
                calls[agg] = comm.traffic().calls;
                seen[agg] = results.at(0);
            }
        }));
    }
    EXPECT_EQ(calls[4] - calls[1], 2 * 3 * (4 - 1));  // sizes x timed iterations x extra calls
    ASSERT_EQ(seen[4].rows.size(), 2u);
    for (const auto& row : seen[4].rows) {
        EXPECT_GT(row.time.min, 0);
        EXPECT_LE(row.time.median, row.time.max);
    }
}

// Every collective of the table runs and checks through comm-profile's sweep.
TEST(CommProfile, SweepsEveryCollectiveOfTheTable) {
    for (Collective c : acc::perf::all_collectives()) {
        expect_all_ok(gloo_ranks(2, [c](ProcessGroupCollectives& comm) {
            SweepPlan plan;
            plan.collectives = {c};
            plan.min_bytes = 64;
            plan.max_bytes = 256;
            plan.iterations = 1;
            plan.warmup = 0;
            plan.check = true;
            auto results = measure(comm, plan);
            ASSERT_EQ(results.size(), 1u);
            for (const auto& row : results[0].rows) EXPECT_EQ(row.wrong, 0) << acc::perf::collective_name(c);
        }));
    }
}
