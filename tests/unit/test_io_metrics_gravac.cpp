// The metrics file's GraVAC record (format 1.1, /gravac): it reads back, a 1.0
// file without it still reads, a resumed run keeps the steps of the kept epochs,
// and a broken record is refused naming the dataset.
#include "io/h5.hpp"
#include "io/metrics.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <cmath>

using namespace acc::io;
using acc::test::error_of;
using acc::test::TempDir;

namespace {

Metrics sample(bool gravac) {
    Metrics m;
    m.header.provenance = {"train-dist 0.1.0", "train-dist --model mlp --gravac topk"};
    m.run.model = "mlp";
    m.run.dataset = "fashion-mnist";
    m.run.batch_size = 32;
    m.run.world_size = 2;
    m.run.mode = gravac ? "gravac" : "compress";
    m.run.backend = "gloo";
    m.run.device = "cpu";
    m.parameters = {{"fc.weight", {4, 3}}, {"fc.bias", {4}}};
    m.levels = {"none"};
    for (int e = 0; e < 3; ++e) {
        MetricsEpoch row;
        row.lr = 0.1;
        row.steps = 2;
        row.samples = 128;
        row.batch_size = 64;
        row.level = {0, 0};
        m.epochs.push_back(row);
    }
    if (gravac) {
        MetricsGravac& g = m.gravac;
        g.enabled = true;
        g.family = "topk";
        g.policy = "geometric";
        g.theta_min = 10;
        g.theta_max = 1000;
        g.epsilon = 0.7;
        g.omega = 0.01;
        g.theta_s = 2;
        g.smoothing = 0.02;
        g.window = 3;
        // Epoch 0: dense then theta_min; epoch 1: candidate twice; epoch 2: theta_min, candidate.
        g.steps = {{0, 1, 2, 10, 20, acc::regime::GravacStep::kNaN, acc::regime::GravacStep::kNaN},
                   {0, 10, 1, 10, 20, 0.9, 0.6},
                   {1, 20, 0, 10, 20, 0.91, 0.75},
                   {1, 20, 0, 10, 40, 0.92, 0.76},
                   {2, 10, 1, 10, 40, 0.93, 0.5},
                   {2, 40, 0, 10, 40, 0.94, 0.71}};
        g.throughput = {{0, 1, 100}, {0, 10, 90}, {1, 1, 100}, {1, 10, 90}, {1, 20, 80},
                        {2, 1, 100}, {2, 10, 90}, {2, 20, 80}, {2, 40, 70}};
    }
    return m;
}

}  // namespace

TEST(MetricsGravac, RoundTripWithPerEpochSummaries) {
    TempDir dir;
    const std::string path = dir.file("g.h5");
    Metrics m = sample(true);
    write_metrics(path, m);
    Metrics back = read_metrics(path);
    EXPECT_EQ(back.header.major, 1);
    EXPECT_EQ(back.header.minor, kMetricsMinor);
    ASSERT_TRUE(back.gravac.enabled);
    EXPECT_EQ(back.gravac.family, "topk");
    EXPECT_EQ(back.gravac.policy, "geometric");
    EXPECT_EQ(back.gravac.window, 3);
    EXPECT_DOUBLE_EQ(back.gravac.smoothing, 0.02);
    ASSERT_EQ(back.gravac.steps.size(), 6u);
    EXPECT_TRUE(std::isnan(back.gravac.steps[0].gain_min));
    EXPECT_EQ(back.gravac.steps[3].candidate, 40);
    EXPECT_EQ(back.gravac.steps[5].factor, 40);
    EXPECT_EQ(back.gravac.throughput.size(), 9u);
    EXPECT_EQ(back.gravac.throughput[8].throughput, 70);

    // The per-epoch summaries, counted by hand from the steps above.
    const H5File f = H5File::open(path, false);
    EXPECT_EQ(f.read<std::int64_t>("/gravac/epochs/steps_candidate"), (std::vector<std::int64_t>{0, 2, 1}));
    EXPECT_EQ(f.read<std::int64_t>("/gravac/epochs/steps_theta_min"), (std::vector<std::int64_t>{1, 0, 1}));
    EXPECT_EQ(f.read<std::int64_t>("/gravac/epochs/steps_dense"), (std::vector<std::int64_t>{1, 0, 0}));
    EXPECT_EQ(f.read<double>("/gravac/epochs/candidate"), (std::vector<double>{20, 40, 40}));
    EXPECT_EQ(f.read<double>("/gravac/epochs/gain_candidate"), (std::vector<double>{0.6, 0.76, 0.71}));
}

TEST(MetricsGravac, OtherModesWriteNoGravacGroup) {
    TempDir dir;
    const std::string path = dir.file("c.h5");
    write_metrics(path, sample(false));
    EXPECT_FALSE(H5File::open(path, false).exists("/gravac"));
    EXPECT_FALSE(read_metrics(path).gravac.enabled);
}

// A file as format 1.0 wrote it: the same layout, without /gravac, version "1.0".
TEST(MetricsGravac, ReadsVersion10Files) {
    TempDir dir;
    const std::string path = dir.file("old.h5");
    write_metrics(path, sample(false));
    {
        H5File f = H5File::open(path, true);
        f.write_attr("/", "format_version", std::string("1.0"));
    }
    Metrics back = read_metrics(path);
    EXPECT_EQ(back.header.minor, 0);
    EXPECT_EQ(back.epochs.size(), 3u);
    EXPECT_FALSE(back.gravac.enabled);
    // And a run resumed from it continues it in the new version.
    MetricsWriter w = MetricsWriter::resume(path, sample(false), 2);
    w.append_epoch(sample(false).epochs[2]);
    EXPECT_EQ(read_metrics(path).header.minor, kMetricsMinor);
}

TEST(MetricsGravac, ResumeKeepsTheStepsOfKeptEpochs) {
    TempDir dir;
    const std::string path = dir.file("r.h5");
    write_metrics(path, sample(true));
    MetricsWriter w = MetricsWriter::resume(path, sample(true), 1);
    EXPECT_EQ(w.metrics().gravac.steps.size(), 2u);
    EXPECT_EQ(w.metrics().gravac.throughput.size(), 2u);
    Metrics again = sample(true);
    std::vector<acc::regime::GravacStep> epoch1(again.gravac.steps.begin() + 2, again.gravac.steps.begin() + 4);
    w.append_gravac(epoch1, {{1, 1, 100}});
    w.append_epoch(again.epochs[1]);
    Metrics back = read_metrics(path);
    ASSERT_EQ(back.gravac.steps.size(), 4u);
    EXPECT_EQ(back.gravac.steps[3].epoch, 1);
    EXPECT_EQ(back.gravac.throughput.size(), 3u);
}

TEST(MetricsGravac, RefusesBrokenRecords) {
    TempDir dir;
    struct Case {
        const char* what;
        void (*damage)(Metrics&);
        const char* message;
    };
    const Case cases[] = {
        {"choice", [](Metrics& m) { m.gravac.steps[1].choice = 7; }, "/gravac/steps/choice is 7 at step 1"},
        {"epoch", [](Metrics& m) { m.gravac.steps[5].epoch = 3; }, "/gravac/steps/epoch is 3 at step 5"},
        {"factor", [](Metrics& m) { m.gravac.steps[2].factor = 0.5; }, "/gravac/steps/factor at step 2 must be >= 1"},
    };
    for (const auto& c : cases) {
        const std::string path = dir.file(std::string(c.what) + ".h5");
        Metrics m = sample(true);
        c.damage(m);
        write_metrics(path, m);
        const std::string error = error_of([&] { read_metrics(path); });
        EXPECT_NE(error.find(c.message), std::string::npos) << c.what << ": " << error;
    }
}
