// The file formats: round trips, crash safety, and one clear error per kind of bad file.
#include "base/error.hpp"
#include "base/text.hpp"
#include "io/atomic.hpp"
#include "io/grads.hpp"
#include "io/h5.hpp"
#include "io/schedule.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;
using namespace acc::io;
using acc::test::error_of;
using acc::test::TempDir;

namespace {

std::vector<Parameter> conv4_fc_parameters() {
    return {{"conv1.weight", {4, 3, 3, 3}}, {"conv1.bias", {4}}, {"fc.weight", {10, 36}}, {"fc.bias", {10}}};
}

EpochStats epoch(int e) {
    EpochStats s;
    s.lr = 0.1 / (1 + e);
    s.loss = 2.0 - 0.1 * e;
    s.accuracy = 0.1 * e;
    s.test_loss = e % 2 ? EpochStats::kNone : 1.5;
    s.test_accuracy = e % 2 ? EpochStats::kNone : 0.5;
    s.steps = 100 + e;
    s.samples = 6400;
    s.seconds = 1.5;
    s.norm = {1.0 + e, 0.5 * e, 3.0, 4.0 + e};
    return s;
}

Provenance provenance() { return {"test_io 0.1.0", "test_io --gtest"}; }

std::string write_grads(const TempDir& dir, int epochs, const std::string& name = "grads.h5") {
    std::string path = dir.file(name);
    GradsWriter w(path, provenance(), {"tiny", "synthetic", 64, 2, 7}, conv4_fc_parameters(), true);
    for (int e = 0; e < epochs; ++e) {
        w.add_step_norms(e * 2, {1, 2, 3, 4});
        w.add_step_norms(e * 2 + 1, {5, 6, 7, 8});
        if (e == 1)
            for (size_t p = 0; p < conv4_fc_parameters().size(); ++p)
                w.add_snapshot(p, std::vector<float>(static_cast<size_t>(conv4_fc_parameters()[p].numel()),
                                                     0.25f * (p + 1)));
        w.append_epoch(epoch(e));
    }
    w.finish();
    return path;
}

// Runs `mutate` on a writable copy of a good file, then expects read_grads to fail
// with a message containing every fragment.
void expect_grads_error(const std::function<void(H5File&)>& mutate, const std::vector<std::string>& fragments) {
    TempDir dir;
    std::string path = write_grads(dir, 3);
    {
        H5File f = H5File::open(path, true);
        mutate(f);
        f.close();
    }
    try {
        read_grads(path);
        ADD_FAILURE() << "no error for a broken file";
    } catch (const acc::FileError& e) {
        std::string message = e.what();
        EXPECT_EQ(message.rfind(path + ": ", 0), 0u) << message;
        for (const auto& fragment : fragments) EXPECT_NE(message.find(fragment), std::string::npos) << message;
    }
}

}  // namespace

TEST(Grads, RoundTrip) {
    TempDir dir;
    std::string path = write_grads(dir, 3);
    GradStats g = read_grads(path);
    EXPECT_EQ(g.header.format, "accordion.grads");
    EXPECT_EQ(g.header.major, 1);
    EXPECT_EQ(g.header.provenance.producer, "test_io 0.1.0");
    EXPECT_EQ(g.header.provenance.command_line, "test_io --gtest");
    EXPECT_TRUE(g.complete);
    EXPECT_EQ(g.run.model, "tiny");
    EXPECT_EQ(g.run.world_size, 2);
    ASSERT_EQ(g.parameters.size(), 4u);
    EXPECT_EQ(g.parameters[0].shape, (std::vector<std::int64_t>{4, 3, 3, 3}));
    EXPECT_EQ(g.parameters[1].shape, (std::vector<std::int64_t>{4}));
    ASSERT_EQ(g.epochs.size(), 3u);
    for (int e = 0; e < 3; ++e) {
        EpochStats want = epoch(e);
        const EpochStats& got = g.epochs[static_cast<size_t>(e)];
        EXPECT_EQ(got.norm, want.norm);
        EXPECT_DOUBLE_EQ(got.lr, want.lr);
        EXPECT_EQ(got.steps, want.steps);
        EXPECT_EQ(std::isnan(got.test_loss), std::isnan(want.test_loss));
    }
    EXPECT_TRUE(g.has_step_norms);
    EXPECT_EQ(g.snapshot_epochs, (std::vector<std::int64_t>{1}));
    auto snapshot = read_snapshot(path, 1);
    ASSERT_EQ(snapshot.size(), 4u);
    EXPECT_EQ(snapshot[2].size(), 360u);
    EXPECT_FLOAT_EQ(snapshot[2][17], 0.75f);
    EXPECT_NE(error_of([&] { read_snapshot(path, 2); }).find("no gradient snapshot of epoch 2"), std::string::npos);
    // Only the final file remains: no temporary files beside it.
    EXPECT_EQ(dir.entries(), (std::vector<std::string>{"grads.h5"}));
}

TEST(Grads, FileAppearsOnlyOnceTheFirstEpochIsComplete) {
    TempDir dir;
    std::string path = dir.file("grads.h5");
    GradsWriter w(path, provenance(), {}, conv4_fc_parameters(), false);
    EXPECT_FALSE(fs::exists(path));
    w.append_epoch(epoch(0));
    EXPECT_TRUE(fs::exists(path));
    GradStats partial = read_grads(path);
    EXPECT_FALSE(partial.complete);
    EXPECT_EQ(partial.epochs.size(), 1u);
    w.append_epoch(epoch(1));
    w.finish();
    EXPECT_TRUE(read_grads(path).complete);
}

TEST(Grads, KilledWriterLeavesEveryCompletedEpoch) {
    TempDir dir;
    std::string path = dir.file("grads.h5");
    int ready[2];
    ASSERT_EQ(pipe(ready), 0);
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) {
        // The child records epochs until it is killed, reporting each completed one.
        close(ready[0]);
        GradsWriter w(path, provenance(), {}, conv4_fc_parameters(), true);
        for (int e = 0;; ++e) {
            w.add_step_norms(e, {1, 2, 3, 4});
            w.append_epoch(epoch(e));
            char c = 'e';
            if (write(ready[1], &c, 1) != 1) _exit(3);
            usleep(e < 3 ? 1000 : 10000000);
        }
    }
    close(ready[1]);
    char c;
    for (int i = 0; i < 3; ++i) ASSERT_EQ(read(ready[0], &c, 1), 1);
    kill(child, SIGKILL);
    int status = 0;
    waitpid(child, &status, 0);
    close(ready[0]);
    ASSERT_TRUE(WIFSIGNALED(status));
    EXPECT_EQ(WTERMSIG(status), SIGKILL);
    GradStats g = read_grads(path);
    EXPECT_FALSE(g.complete);
    ASSERT_GE(g.epochs.size(), 3u);
    ASSERT_LE(g.epochs.size(), 4u);
    for (size_t e = 0; e < g.epochs.size(); ++e) EXPECT_EQ(g.epochs[e].norm, epoch(static_cast<int>(e)).norm);
}

TEST(Grads, ResumeDropsEpochsAfterTheCheckpoint) {
    TempDir dir;
    std::string path = write_grads(dir, 5);
    GradsWriter w = GradsWriter::resume(path, conv4_fc_parameters(), 2, true);
    EXPECT_EQ(w.epochs_written(), 2);
    EXPECT_FALSE(read_grads(path).complete);
    EXPECT_TRUE(read_grads(path).snapshot_epochs == std::vector<std::int64_t>{1});
    EpochStats replacement = epoch(9);
    w.add_step_norms(99, {9, 9, 9, 9});
    w.append_epoch(replacement);
    w.finish();
    GradStats g = read_grads(path);
    ASSERT_EQ(g.epochs.size(), 3u);
    EXPECT_EQ(g.epochs[2].norm, replacement.norm);
    EXPECT_EQ(g.epochs[1].norm, epoch(1).norm);
    H5File f = H5File::open(path, false);
    EXPECT_EQ(f.read<std::int64_t>("/steps/epoch"), (std::vector<std::int64_t>{0, 0, 1, 1, 2}));
    EXPECT_EQ(f.read<std::int64_t>("/epochs/epoch"), (std::vector<std::int64_t>{0, 1, 2}));
}

TEST(Grads, ResumeRefusesAnotherModelOrTooFewEpochs) {
    TempDir dir;
    std::string path = write_grads(dir, 2);
    auto other = conv4_fc_parameters();
    other[2].shape = {10, 37};
    EXPECT_NE(error_of([&] { GradsWriter::resume(path, other, 1, false); })
                  .find("parameter 'fc.weight' has shape 10x36, expected 10x37"),
              std::string::npos);
    EXPECT_NE(error_of([&] { GradsWriter::resume(path, conv4_fc_parameters(), 5, false); }).find("holds 2 epochs"),
              std::string::npos);
}

TEST(Grads, ErrorsNameTheFileAndTheProblem) {
    TempDir dir;
    std::string missing = dir.file("nope.h5");
    EXPECT_EQ(error_of([&] { read_grads(missing); }), missing + ": no such file");

    std::string text = dir.file("notes.txt");
    std::ofstream(text) << "epoch,norm\n0,1.0\n";
    EXPECT_EQ(error_of([&] { read_grads(text); }), text + ": not an HDF5 file");

    std::string empty = dir.file("empty.h5");
    std::ofstream(empty).close();
    EXPECT_EQ(error_of([&] { read_grads(empty); }), empty + ": the file is empty");

    std::string good = write_grads(dir, 3, "good.h5");
    std::string truncated = dir.file("truncated.h5");
    fs::copy_file(good, truncated);
    fs::resize_file(truncated, fs::file_size(good) / 2);
    std::string message = error_of([&] { read_grads(truncated); });
    EXPECT_EQ(message.rfind(truncated + ": ", 0), 0u) << message;
    EXPECT_NE(message.find("truncated"), std::string::npos) << message;

    EXPECT_EQ(error_of([&] { read_grads(dir.file("")); }).find("is a directory"), dir.file("").size() + 2);
}

TEST(Grads, WrongKindOfFileAndNewerVersions) {
    expect_grads_error([](H5File& f) { f.write_attr("/", "format", std::string("accordion.schedule")); },
                       {"is an accordion.schedule file, expected an accordion.grads file"});
    expect_grads_error([](H5File& f) { H5Adelete(f.id(), "format"); }, {"not an accordion.grads file"});
    expect_grads_error([](H5File& f) { f.write_attr("/", "format_version", std::string("2.0")); },
                       {"format version 2.0 is newer"});
    expect_grads_error([](H5File& f) { f.write_attr("/", "format_version", std::string("one")); },
                       {"not of the form MAJOR.MINOR"});
}

TEST(Grads, MissingAndMismatchedDatasets) {
    expect_grads_error([](H5File& f) { H5Ldelete(f.id(), "/epochs/lr", H5P_DEFAULT); },
                       {"dataset /epochs/lr is missing"});
    expect_grads_error([](H5File& f) { H5Ldelete(f.id(), "/parameters/name", H5P_DEFAULT); },
                       {"dataset /parameters/name is missing"});
    expect_grads_error([](H5File& f) { f.write("/epochs/norm", std::vector<double>(9, 1.0), {3, 3}); },
                       {"/epochs/norm has 3 columns but /parameters lists 4 parameters"});
    expect_grads_error([](H5File& f) { f.write("/epochs/lr", std::vector<double>(2, 1.0), {2}); },
                       {"/epochs/lr has shape 2, expected 3"});
    expect_grads_error([](H5File& f) { f.write("/epochs/norm", std::vector<double>{}, {0, 4}); },
                       {"holds no completed epoch"});
    expect_grads_error([](H5File& f) { f.write("/parameters/numel", std::vector<std::int64_t>{108, 4, 360, 11}, {4}); },
                       {"parameter 'fc.bias' has shape 10 (10 elements) but numel 11"});
    expect_grads_error([](H5File& f) { f.write_strings("/parameters/name", {"a", "b", "a", "c"}); },
                       {"parameter name 'a' appears twice"});
    expect_grads_error([](H5File& f) { f.write_strings("/epochs/steps", {"1", "2", "3"}); },
                       {"/epochs/steps holds strings, expected integers"});
}

// Shapes whose element count overflows 64 bits (and would be read as numel 0) or
// exceeds 2^48 are refused, naming the parameter and the shape.
TEST(Grads, ShapesOverTwoToThe48ValuesAreRefused) {
    const std::int64_t big = std::int64_t{1} << 62, half = std::int64_t{1} << 32;
    struct Case {
        std::vector<std::int64_t> fc_weight;
        std::int64_t numel;
        std::string shape;
    };
    for (const Case& c : {Case{{big, 4}, 0, "4611686018427387904x4"}, Case{{half, half}, 0, "4294967296x4294967296"},
                          Case{{std::int64_t{1} << 49, 1}, std::int64_t{1} << 49, "562949953421312x1"}}) {
        expect_grads_error(
            [&](H5File& f) {
                std::vector<std::int64_t> shape{4, 3, 3, 3, 4, 0, 0, 0, c.fc_weight[0], c.fc_weight[1], 0, 0, 10, 0, 0, 0};
                f.write("/parameters/shape", shape, {4, 4});
                f.write("/parameters/numel", std::vector<std::int64_t>{108, 4, c.numel, 10}, {4});
            },
            {"parameter 'fc.weight' has shape " + c.shape + ", more than 2^48 values"});
    }
    EXPECT_EQ(shape_problem({std::int64_t{1} << 24, std::int64_t{1} << 24}), "");
    EXPECT_NE(shape_problem({(std::int64_t{1} << 24) + 1, std::int64_t{1} << 24}), "");
    EXPECT_EQ(shape_problem({3, 0}), "has dimension 1 of size 0");
}

// A snapshot must have its parameter's shape exactly; the same number of values
// in another shape (transposed) is not the same matrix.
TEST(Grads, TransposedSnapshotIsRefused) {
    TempDir dir;
    std::string path = write_grads(dir, 3);
    {
        H5File f = H5File::open(path, true);
        f.write("/snapshots/epoch_1/fc.weight", std::vector<float>(360, 0.5f), {36, 10});
        f.close();
    }
    std::string message = error_of([&] { read_snapshot(path, 1); });
    EXPECT_EQ(message, path + ": /snapshots/epoch_1/fc.weight has shape 36x10, expected 10x36 (the shape of parameter "
                              "'fc.weight')");
}

TEST(Grads, NanAndInfAreNamedByEpochAndParameter) {
    expect_grads_error(
        [](H5File& f) {
            auto norm = f.read<double>("/epochs/norm");
            norm[2 * 4 + 2] = NAN;
            f.write("/epochs/norm", norm, {3, 4});
        },
        {"gradient norm is NaN at epoch 2, parameter 'fc.weight'"});
    expect_grads_error(
        [](H5File& f) {
            auto norm = f.read<double>("/epochs/norm");
            norm[1] = INFINITY;
            f.write("/epochs/norm", norm, {3, 4});
        },
        {"at epoch 0, parameter 'conv1.bias'", "finite"});
    expect_grads_error([](H5File& f) { f.write("/epochs/lr", std::vector<double>{0.1, NAN, 0.1}, {3}); },
                       {"learning rate of epoch 1"});
}

namespace {

Schedule sample_schedule(const std::string& mode) {
    Schedule s;
    s.header.provenance = provenance();
    s.mode = parse_schedule_mode(mode, "mode");
    s.low = mode == "batch" ? "512" : "powersgd:2";
    s.high = mode == "batch" ? "4096" : "powersgd:1";
    s.granularity = mode == "batch" ? "model" : "layer";
    s.source = "grads.h5";
    s.parameters = conv4_fc_parameters();
    s.epochs = 2;
    s.critical = {1, 1, 1, 1, 0, 1, 0, 0};
    s.ratio = {NAN, NAN, NAN, NAN, 0.1, 0.9, 0.2, 0.3};
    s.reason = {2, 2, 2, 2, 0, 1, 0, 0};
    if (mode == "compression") {
        s.levels = {"none", "powersgd:2", "powersgd:1"};
        s.level = {1, 0, 1, 0, 2, 0, 2, 0};
    } else {
        s.critical = {1, 1, 1, 1, 0, 0, 0, 0};  // the whole model's decision in every column
        s.batch_size = {512, 4096};
        s.lr_scale = {1, 8};
    }
    return s;
}

}  // namespace

TEST(Schedule, RoundTripInBothModes) {
    TempDir dir;
    for (std::string mode : {"compression", "batch"}) {
        std::string path = dir.file(mode + ".h5");
        write_schedule(path, sample_schedule(mode));
        Schedule s = read_schedule(path);
        EXPECT_EQ(s.header.format, "accordion.schedule");
        EXPECT_EQ(schedule_mode_name(s.mode), mode);
        EXPECT_EQ(s.epochs, 2);
        EXPECT_EQ(s.critical, sample_schedule(mode).critical);
        EXPECT_EQ(s.reason, sample_schedule(mode).reason);
        EXPECT_TRUE(std::isnan(s.ratio[0]));
        EXPECT_DOUBLE_EQ(s.ratio[5], 0.9);
        if (mode == "compression") {
            EXPECT_EQ(s.level_of(1, 0), "powersgd:1");
            EXPECT_EQ(s.level_of(0, 1), "none");
        } else {
            EXPECT_EQ(s.batch_size, (std::vector<std::int64_t>{512, 4096}));
            EXPECT_EQ(s.lr_scale, (std::vector<double>{1, 8}));
        }
    }
}

TEST(Schedule, ValidatesWhatTrainDistWillUse) {
    TempDir dir;
    std::string path = dir.file("sched.h5");
    Schedule bad = sample_schedule("compression");
    bad.level[3] = 7;
    write_schedule(path, bad);
    EXPECT_NE(error_of([&] { read_schedule(path); }).find("/epochs/level is 7 at epoch 0, parameter 'fc.bias'"),
              std::string::npos);
    Schedule batch = sample_schedule("batch");
    batch.batch_size[1] = 0;
    write_schedule(path, batch);
    EXPECT_NE(error_of([&] { read_schedule(path); }).find("batch_size is 0 at epoch 1"), std::string::npos);
    // A batch schedule's decisions are the whole model's: an epoch whose columns differ
    // is no schedule regime-detect writes, and which column would decide is unknown.
    Schedule split = sample_schedule("batch");
    split.critical[5] = 1;
    write_schedule(path, split);
    EXPECT_EQ(error_of([&] { read_schedule(path); }),
              path + ": /epochs/critical is 1 for parameter 'conv1.bias' but 0 for 'conv1.weight' in epoch 1; a batch "
                     "schedule decides for the whole model, the same in every column");
    Schedule reason = sample_schedule("compression");
    reason.reason[0] = 9;
    write_schedule(path, reason);
    EXPECT_NE(error_of([&] { read_schedule(path); }).find("/epochs/reason is 9"), std::string::npos);
    std::string grads = write_grads(dir, 1);
    EXPECT_NE(error_of([&] { read_schedule(grads); }).find("expected an accordion.schedule file"), std::string::npos);
}

// Values train-dist would turn into an overflow or a NaN learning rate are refused on
// reading, in one sentence naming the file, the dataset, the epoch and the value.
TEST(Schedule, RefusesHugeLrScaleAndMisplacedNanRatio) {
    TempDir dir;
    std::string path = dir.file("sched.h5");
    for (double scale : {1e300, 1048577.0, -2.0, double(NAN), double(INFINITY)}) {
        Schedule batch = sample_schedule("batch");
        batch.lr_scale[1] = scale;
        write_schedule(path, batch);
        std::string message = error_of([&] { read_schedule(path); });
        EXPECT_EQ(message, path + ": /epochs/lr_scale is " + acc::printf_text("%.10g", scale) +
                               " at epoch 1; it must be a number in (0, 1048576]")
            << scale;
    }
    Schedule top = sample_schedule("batch");
    top.lr_scale[1] = 1048576;
    write_schedule(path, top);
    EXPECT_EQ(read_schedule(path).lr_scale[1], 1048576);

    Schedule ratio = sample_schedule("compression");
    ratio.ratio[5] = NAN;  // epoch 1, reason 1 (at or above eta)
    write_schedule(path, ratio);
    EXPECT_EQ(error_of([&] { read_schedule(path); }),
              path + ": /epochs/ratio is NaN at epoch 1, parameter 'conv1.bias'; NaN is valid only in the first "
                     "interval (reason 2), here the reason is 1");
}

// /epochs/epoch must number the epochs 0..E-1, as in a grads file: another
// numbering or length is refused, naming the row.
TEST(Schedule, EpochIndexMustReadZeroToEMinusOne) {
    TempDir dir;
    const std::string path = dir.file("sched.h5");
    for (const auto& index : {std::vector<std::int64_t>{0, 99}, std::vector<std::int64_t>{0, 1, 2},
                              std::vector<std::int64_t>{1}}) {
        write_schedule(path, sample_schedule("compression"));
        {
            H5File f = H5File::open(path, true);
            f.write("/epochs/epoch", index, {index.size()});
            f.close();
        }
        const std::string message = error_of([&] { read_schedule(path); });
        if (index.size() == 2)
            EXPECT_EQ(message, path + ": /epochs/epoch row 1 is 99; epochs must be numbered 0, 1, 2, ...");
        else
            EXPECT_CONTAINS(message, path + ": /epochs/epoch has shape " + std::to_string(index.size()));
    }
}

TEST(Grads, WorldSizeBelowOneIsRefused) {
    expect_grads_error([](H5File& f) { f.write_attr("/", "world_size", std::int64_t{-3}); },
                       {"world_size is -3; it must be at least 1"});
    expect_grads_error([](H5File& f) { f.write_attr("/", "world_size", std::int64_t{0}); }, {"world_size is 0"});
}

TEST(Atomic, UncommittedFilesVanishAndCommitReplaces) {
    TempDir dir;
    std::string dest = dir.file("out.h5");
    std::ofstream(dest) << "old";
    {
        AtomicPath a(dest);
        std::ofstream(a.temp()) << "new";
        EXPECT_EQ(dir.entries().size(), 2u);
    }
    EXPECT_EQ(dir.entries(), (std::vector<std::string>{"out.h5"}));
    {
        AtomicPath a(dest);
        std::ofstream(a.temp()) << "new";
        a.commit();
    }
    std::ifstream in(dest);
    std::string content;
    in >> content;
    EXPECT_EQ(content, "new");
    EXPECT_THROW(check_writable_destination(dir.file("no/such/dir/x.h5")), acc::FileError);
}

TEST(Parameters, CompareNamesTheFirstDifference) {
    auto a = conv4_fc_parameters();
    EXPECT_EQ(compare_parameters(a, a), "");
    auto renamed = a;
    renamed[1].name = "conv1.b";
    EXPECT_EQ(compare_parameters(a, renamed), "parameter 1 is 'conv1.b', expected 'conv1.bias'");
    auto shorter = a;
    shorter.pop_back();
    EXPECT_EQ(compare_parameters(a, shorter), "3 parameters, expected 4 (first missing: 'fc.bias')");
}
