// The rank session grad-dump and train-dist share (lib/app/rank_session): the
// checks that keep ranks in step fail where the ranks differ, on every rank,
// and resuming delivers rank 0's checkpoint bytes to all.
#include "app/rank_session.hpp"
#include "app/same_settings.hpp"

#include "base/error.hpp"
#include "support/thread_collectives.hpp"

#include "test_support.hpp"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <mutex>

using acc::app::RankSession;
using acc::comm::Collectives;
using acc::test::thread_ranks;

TEST(RankSession, OtherOptionsOnAnyRankStopEveryRank) {
    std::mutex mutex;
    std::vector<std::string> errors;
    thread_ranks(3, [&](int rank, Collectives& comm) {
        RankSession session(&comm);
        session.check_same_options("--model mlp");  // all agree
        try {
            session.check_same_options(rank == 2 ? "--model cnn" : "--model mlp");
        } catch (const acc::UsageError& e) {
            std::lock_guard<std::mutex> lock(mutex);
            errors.push_back(e.what());
        }
    });
    ASSERT_EQ(errors.size(), 3u);
    for (const auto& e : errors) EXPECT_EQ(e.rfind("rank 2 was started with other options than rank 0", 0), 0u) << e;
}

// comm-profile's form of the check: its own words for what differs and what must agree.
TEST(RankSession, SameSettingsNamesTheFirstRankThatDiffers) {
    std::mutex mutex;
    std::vector<std::string> errors;
    thread_ranks(4, [&](int rank, Collectives& comm) {
        acc::app::check_same_settings(comm, "resnet18:128", "model options", " (--model must agree)");
        try {
            acc::app::check_same_settings(comm, rank >= 2 ? "" : "resnet18:128", "model options",
                                          " (--model must agree)");
        } catch (const acc::UsageError& e) {
            std::lock_guard<std::mutex> lock(mutex);
            errors.push_back(e.what());
        }
    });
    ASSERT_EQ(errors.size(), 4u);
    for (const auto& e : errors)
        EXPECT_EQ(e, "rank 2 was started with other model options than rank 0 (--model must agree)");
}

TEST(RankSession, RankZerosWeightsReachEveryRankAndDifferencesAreFound) {
    std::mutex mutex;
    std::vector<std::string> errors;
    thread_ranks(2, [&](int rank, Collectives& comm) {
        RankSession session(&comm);
        std::vector<torch::Tensor> weights = {torch::full({3}, static_cast<float>(rank + 1)),
                                              torch::full({2, 2}, static_cast<float>(10 * rank))};
        session.broadcast_from_leader(weights);
        EXPECT_TRUE(torch::equal(weights[0], torch::full({3}, 1.0f)));
        EXPECT_TRUE(torch::equal(weights[1], torch::zeros({2, 2})));
        session.check_same_weights(weights, "weights", 0, 5);
        if (rank == 1) weights[1][0][0] = 1.0f;
        try {
            session.check_same_weights(weights, "weights", 1, 10);
        } catch (const acc::Error& e) {
            std::lock_guard<std::mutex> lock(mutex);
            errors.push_back(e.what());
        }
    });
    ASSERT_EQ(errors.size(), 2u);
    for (const auto& e : errors) EXPECT_CONTAINS(e, "after epoch 1 rank 1 holds other weights than rank 0");
}

TEST(RankSession, ValuesAndTextFromRankZero) {
    thread_ranks(2, [&](int rank, Collectives& comm) {
        RankSession session(&comm);
        EXPECT_EQ(session.sum({1.0, static_cast<double>(rank)}), (std::vector<double>{2.0, 1.0}));
        const std::vector<std::int32_t> mine = {static_cast<std::int32_t>(7 + rank), 2};
        EXPECT_EQ(session.broadcast(rank == 0 ? mine : std::vector<std::int32_t>(), 2),
                  (std::vector<std::int32_t>{7, 2}));
        EXPECT_EQ(session.broadcast(rank == 0 ? std::string("compression\nnone") : std::string()),
                  "compression\nnone");
        EXPECT_EQ(session.gather(10 * rank), (std::vector<std::int64_t>{0, 10}));
    });
}

TEST(RankSession, ResumeSendsRankZerosCheckpoint) {
    acc::test::TempDir dir;
    const std::string path = dir.file("session.ckpt.h5");
    {
        std::ofstream out(path, std::ios::binary);
        out << "rank 0's bytes";
    }
    thread_ranks(2, [&](int rank, Collectives& comm) {
        RankSession session(&comm);
        // Only rank 0 reads the file: the others may run where it is not.
        const auto image = session.checkpoint_image(rank == 0 ? path : dir.file("elsewhere/session.ckpt.h5"));
        EXPECT_EQ(std::string(image.begin(), image.end()), "rank 0's bytes");
    });
    RankSession alone(nullptr);
    EXPECT_EQ(alone.world(), 1);
    const auto image = alone.checkpoint_image(path);
    EXPECT_EQ(std::string(image.begin(), image.end()), "rank 0's bytes");
    EXPECT_THROW(alone.checkpoint_image(path + ".missing"), acc::FileError);
    std::remove(path.c_str());
}

TEST(RankSession, SameRunChecksNameWhatChanged) {
    using acc::app::check_same_run;
    EXPECT_NO_THROW(check_same_run("c.h5", "", "--lr 0.1\n", {{"--model", "mlp", "mlp"}}));
    try {
        check_same_run("c.h5", "", "", {{"--model", "mlp", "cnn"}});
        ADD_FAILURE() << "no error";
    } catch (const acc::UsageError& e) {
        EXPECT_EQ(std::string(e.what()),
                  "--resume: c.h5 is from a run with --model mlp, not cnn; resume with the options of the original run");
    }
    EXPECT_EQ(acc::app::tensor_text(acc::app::text_tensor("a\nb")), "a\nb");
}
