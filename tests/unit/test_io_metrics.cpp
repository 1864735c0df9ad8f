// The metrics file (accordion.metrics): what is written reads back, a killed run
// leaves a whole file, a resumed run continues it, and broken files are refused
// with a sentence naming the problem.
#include "io/h5.hpp"
#include "io/metrics.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

using namespace acc::io;
using acc::test::error_of;
using acc::test::TempDir;

namespace {

Metrics sample(bool decisions) {
    Metrics m;
    m.header.provenance = {"train-dist 0.1.0", "train-dist --model mlp"};
    m.run.model = "mlp";
    m.run.dataset = "fashion-mnist";
    m.run.batch_size = 32;
    m.run.world_size = 2;
    m.run.seed = 7;
    m.run.mode = decisions ? "accordion" : "compress";
    m.run.compress = decisions ? "" : "powersgd:2";
    m.run.backend = "gloo";
    m.run.device = "cpu";
    m.parameters = {{"fc.weight", {4, 3}}, {"fc.bias", {4}}};
    m.levels = {"none", "powersgd:2"};
    for (int e = 0; e < 3; ++e) {
        MetricsEpoch row;
        row.lr = 0.1 / (e + 1);
        row.loss = 2.0 - e;
        row.accuracy = 0.3 + 0.1 * e;
        row.test_loss = e == 1 ? MetricsEpoch::kNone : 1.5;
        row.test_accuracy = e == 1 ? MetricsEpoch::kNone : 0.5;
        row.steps = 10;
        row.samples = 640;
        row.batch_size = 64;
        row.bytes_sent = 1000 + e;
        row.bytes_sent_total = 1000 * (e + 1);
        row.floats_sent = row.bytes_sent / 4.0;
        row.floats_sent_total = row.bytes_sent_total / 4.0;
        row.seconds = 1.0;
        row.compute_seconds = 0.7;
        row.compression_seconds = 0.1;
        row.encode_seconds = 0.06;
        row.decode_seconds = 0.04;
        row.communication_seconds = 0.2;
        row.level = {1, 0};
        if (decisions) {
            row.norm = {1.5, 0.25};
            row.critical = {1, 0};
            row.ratio = {std::nan(""), 0.125};
            row.reason = {2, 0};
        }
        m.epochs.push_back(row);
    }
    return m;
}

}  // namespace

TEST(Metrics, RoundTrip) {
    TempDir dir;
    for (bool decisions : {false, true}) {
        const std::string path = dir.file(decisions ? "a.h5" : "c.h5");
        Metrics m = sample(decisions);
        m.complete = true;
        write_metrics(path, m);
        Metrics back = read_metrics(path);
        EXPECT_TRUE(back.complete);
        EXPECT_EQ(back.header.format, kMetricsFormat);
        EXPECT_EQ(back.header.provenance.producer, "train-dist 0.1.0");
        EXPECT_EQ(back.run.mode, m.run.mode);
        EXPECT_EQ(back.run.compress, m.run.compress);
        EXPECT_EQ(back.run.world_size, 2);
        EXPECT_EQ(back.levels, m.levels);
        ASSERT_EQ(back.epochs.size(), 3u);
        EXPECT_EQ(back.has_decisions(), decisions);
        for (size_t e = 0; e < 3; ++e) {
            const MetricsEpoch &a = m.epochs[e], &b = back.epochs[e];
            EXPECT_EQ(b.lr, a.lr);
            EXPECT_EQ(b.loss, a.loss);
            EXPECT_EQ(std::isnan(b.test_loss), e == 1);
            EXPECT_EQ(b.bytes_sent, a.bytes_sent);
            EXPECT_EQ(b.bytes_sent_total, a.bytes_sent_total);
            EXPECT_EQ(b.floats_sent_total, a.floats_sent_total);
            EXPECT_EQ(b.communication_seconds, a.communication_seconds);
            EXPECT_EQ(b.level, a.level);
            EXPECT_EQ(b.norm, a.norm);
            EXPECT_EQ(b.critical, a.critical);
            EXPECT_EQ(b.reason, a.reason);
        }
    }
}

TEST(Metrics, WriterKeepsAWholeFileAfterEveryEpochAndResumes) {
    TempDir dir;
    const std::string path = dir.file("m.h5");
    Metrics m = sample(true);
    std::vector<MetricsEpoch> rows = m.epochs;
    m.epochs.clear();
    {
        MetricsWriter writer(path, m);
        writer.append_epoch(rows[0]);
        writer.append_epoch(rows[1]);
        // Killed here: the file holds two epochs and says it is incomplete.
    }
    Metrics partial = read_metrics(path);
    EXPECT_FALSE(partial.complete);
    EXPECT_EQ(partial.epochs.size(), 2u);
    EXPECT_EQ(dir.entries(), std::vector<std::string>{"m.h5"});  // no temporary left behind

    // The checkpoint was at epoch 1: the second row is dropped and written again.
    MetricsWriter resumed = MetricsWriter::resume(path, m, 1);
    resumed.append_epoch(rows[1]);
    resumed.append_epoch(rows[2]);
    resumed.finish();
    Metrics whole = read_metrics(path);
    EXPECT_TRUE(whole.complete);
    ASSERT_EQ(whole.epochs.size(), 3u);
    EXPECT_EQ(whole.epochs[2].bytes_sent, rows[2].bytes_sent);

    Metrics other = m;
    other.levels = {"none", "topk:0.1"};
    EXPECT_EQ(error_of([&] { MetricsWriter::resume(path, other, 1); }),
              path + ": was written by a run with other compression levels; resume with its options");
    EXPECT_EQ(error_of([&] { MetricsWriter::resume(path, m, 5); }),
              path + ": holds 3 epochs but the checkpoint is at epoch 5; it cannot be continued");
    other = m;
    other.parameters[0].shape = {3, 4};
    EXPECT_CONTAINS(error_of([&] { MetricsWriter::resume(path, other, 1); }), "does not belong to this model");
}

TEST(Metrics, RefusesBrokenFiles) {
    TempDir dir;
    const std::string path = dir.file("m.h5");
    write_metrics(path, sample(false));
    {
        H5File f = H5File::open(path, true);
        H5Ldelete(f.id(), "/epochs/lr", H5P_DEFAULT);
        f.write("/epochs/lr", std::vector<double>{0.1, 0.1}, {2});
        f.close();
    }
    EXPECT_EQ(error_of([&] { read_metrics(path); }),
              path + ": /epochs/epoch has shape 3, expected 2 (one per epoch)");
    write_metrics(path, sample(false));
    {
        H5File f = H5File::open(path, true);
        H5Ldelete(f.id(), "/epochs/level", H5P_DEFAULT);
        f.write("/epochs/level", std::vector<std::int32_t>{1, 0, 1, 0, 2, 0}, {3, 2});
        f.close();
    }
    EXPECT_EQ(error_of([&] { read_metrics(path); }),
              path + ": /epochs/level is 2 at epoch 2, parameter 'fc.weight', but /levels has 2 entries");
    Metrics empty = sample(false);
    empty.epochs.clear();
    EXPECT_CONTAINS(error_of([&] { write_metrics(path, empty); }), "needs at least one epoch");

    Metrics timed = sample(false);
    for (auto& e : timed.epochs) e.rank_communication_seconds = {0.2, 0.05};
    write_metrics(path, timed);
    {
        H5File f = H5File::open(path, true);
        H5Ldelete(f.id(), "/epochs/rank_communication_seconds", H5P_DEFAULT);
        f.write("/epochs/rank_communication_seconds", std::vector<double>{0.2, 0.1, 0.3, -1, 0.2, 0.1}, {3, 2});
        f.close();
    }
    EXPECT_EQ(error_of([&] { read_metrics(path); }),
              path + ": /epochs/rank_communication_seconds is -1 at epoch 1, rank 1; it must be a number of "
                     "seconds >= 0, or NaN (not recorded)");
    {
        H5File f = H5File::open(path, true);
        H5Ldelete(f.id(), "/epochs/rank_communication_seconds", H5P_DEFAULT);
        f.write("/epochs/rank_communication_seconds", std::vector<double>{0.2, 0.1, 0.3}, {3, 1});
        f.close();
    }
    EXPECT_CONTAINS(error_of([&] { read_metrics(path); }), "/epochs/rank_communication_seconds has shape 3x1");
    timed.epochs[1].rank_communication_seconds = {0.1};
    EXPECT_CONTAINS(error_of([&] { write_metrics(path, timed); }), "does not have one communication time per rank");
}

// Format 1.2: every rank's communication time per epoch; files without it read as before,
// and a run resumed from such a file writes NaN for the epochs that recorded none.
TEST(Metrics, RanksCommunicationSeconds) {
    TempDir dir;
    const std::string path = dir.file("m.h5");
    Metrics m = sample(false);
    for (size_t e = 0; e < m.epochs.size(); ++e) m.epochs[e].rank_communication_seconds = {0.2, 0.05 * (e + 1)};
    write_metrics(path, m);
    Metrics back = read_metrics(path);
    for (size_t e = 0; e < m.epochs.size(); ++e)
        EXPECT_EQ(back.epochs[e].rank_communication_seconds, m.epochs[e].rank_communication_seconds);

    Metrics old = sample(false);  // no rank's times, as before 1.2
    std::vector<MetricsEpoch> rows = old.epochs;
    write_metrics(path, old);
    EXPECT_TRUE(read_metrics(path).epochs[0].rank_communication_seconds.empty());
    MetricsWriter resumed = MetricsWriter::resume(path, old, 2);
    rows[2].rank_communication_seconds = {0.3, 0.1};
    resumed.append_epoch(rows[2]);
    resumed.finish();
    back = read_metrics(path);
    ASSERT_EQ(back.epochs.size(), 3u);
    ASSERT_EQ(back.epochs[0].rank_communication_seconds.size(), 2u);
    EXPECT_TRUE(std::isnan(back.epochs[0].rank_communication_seconds[0]));
    EXPECT_TRUE(std::isnan(back.epochs[1].rank_communication_seconds[1]));
    EXPECT_EQ(back.epochs[2].rank_communication_seconds, (std::vector<double>{0.3, 0.1}));
}

// Format 1.3: train-dist --auto's plan per epoch reads back; bad codes are refused.
TEST(Metrics, AutomaticModesPlan) {
    TempDir dir;
    const std::string path = dir.file("auto.h5");
    Metrics m = sample(true);
    m.run.mode = "auto";
    for (size_t e = 0; e < m.epochs.size(); ++e) {
        MetricsAuto& a = m.epochs[e].automatic;
        m.epochs[e].has_auto = true;
        a.pays = e == 1 ? 0 : 1;
        a.measured = e == 0 ? 1 : 0;
        a.measure_seconds = e == 0 ? 0.25 : 0;
        a.predicted_seconds = 0.01 * static_cast<double>(e + 1);
        a.overhead_seconds = -0.002;
        a.uncompressed_seconds = 0.05;
        a.compressed_seconds = e == 1 ? std::numeric_limits<double>::infinity() : 0.02;
        a.measured_seconds = 0.011;
        a.compute_seconds = 0.004;
        a.allreduce_alpha = 1e-5;
        a.allreduce_bandwidth = 2.5e6;
        a.allgather_alpha = 2e-5;
        a.allgather_bandwidth = 2e6;
        a.budget = 3;
        a.error = 2.5;
        a.reason = {static_cast<std::int8_t>(e == 1 ? 3 : e == 2 ? 6 : 1), 4};  // 6: accuracy
        a.burst_seconds = 0.013 * static_cast<double>(e);
    }
    write_metrics(path, m);
    const Metrics back = read_metrics(path);
    EXPECT_EQ(back.header.minor, 3);
    ASSERT_TRUE(back.has_auto());
    for (size_t e = 0; e < m.epochs.size(); ++e) {
        const MetricsAuto &a = m.epochs[e].automatic, &b = back.epochs[e].automatic;
        EXPECT_EQ(b.pays, a.pays);
        EXPECT_EQ(b.measured, a.measured);
        EXPECT_EQ(b.predicted_seconds, a.predicted_seconds);
        EXPECT_EQ(b.overhead_seconds, a.overhead_seconds);
        EXPECT_EQ(b.compressed_seconds, a.compressed_seconds);
        EXPECT_EQ(b.allgather_bandwidth, a.allgather_bandwidth);
        EXPECT_EQ(b.reason, a.reason);
        EXPECT_EQ(b.burst_seconds, a.burst_seconds);
    }
    {
        // A file written before the burst was measured: read as NaN.
        H5File f = H5File::open(path, true);
        H5Ldelete(f.id(), "/auto/burst_seconds", H5P_DEFAULT);
        f.close();
        const Metrics old = read_metrics(path);
        for (const auto& e : old.epochs) EXPECT_TRUE(std::isnan(e.automatic.burst_seconds));
        write_metrics(path, m);
    }
    {
        H5File f = H5File::open(path, true);
        H5Ldelete(f.id(), "/auto/reason", H5P_DEFAULT);
        f.write("/auto/reason", std::vector<std::int8_t>{1, 4, 3, 4, 7, 4}, {3, 2});
        f.close();
    }
    EXPECT_EQ(error_of([&] { read_metrics(path); }), path + ": /auto/reason is 7; valid codes are 0..6");
    m.epochs[2].automatic.reason.pop_back();
    EXPECT_CONTAINS(error_of([&] { write_metrics(path, m); }), "has no automatic plan per parameter");
}
