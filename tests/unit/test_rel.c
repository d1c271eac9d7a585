/* SPDX-License-Identifier: BSD-3-Clause */
/* Copyright (c) 2026 The threadwire authors */
/*
 * The reliability layer (src/reliability/) between two ranks in one
 * process, in virtual time, over the scripted fake transport
 * (tests/common/tw_fake_tl.h): every frame waits on a wire the test
 * pumps, so a case drops, duplicates, corrupts, holds or replays exactly
 * the frame it means and expects exact counters (test-matrix rows B3, B4
 * and parts of B6, B8, B9, C2). The rig is test_rel_rig.{h,c}; the cases
 * are in test_rel_frames.c (single frames) and test_rel_paths.c (streams,
 * paths, time). One ctest entry per case (unit/rel.cmake):
 *
 *   basic           sizes 0 B .. 200 KiB both ways: in order, intact, no
 *                   retransmission, no duplicate;
 *   first_frag      the first, or the last, fragment of a 3-fragment
 *   last_frag       message lost: one retransmission, delivered once;
 *   ack_lost        the ack lost: one retransmission, one duplicate at
 *                   the receiver;
 *   nack_lost       the first fragment and its nack lost: one nack, one
 *                   retransmission, delivered once;
 *   dup_done        a fragment replayed after its message completed: one
 *                   duplicate (acked again), nothing delivered twice;
 *   dup_held        a fragment duplicated while it is held behind a gap:
 *                   one duplicate, two held, delivered once (hostile
 *                   input d);
 *   crc_short       a bit of the checksum field flipped, in the short
 *   crc_long        and the long form: one checksum failure, one
 *                   retransmission;
 *   far_stale       sequence numbers 1000 ahead and 1000 behind: one
 *                   out-of-window drop, one duplicate; frames of an
 *                   earlier incarnation of either rank: stale;
 *   left_then_closed  (regression, rel_b8) a peer said goodbye, then
 *                   closes one of two paths cleanly: what it had not
 *                   acknowledged fails at once, quietly -- no failover,
 *                   nothing on the other path, no warning or error;
 *   left_then_due   (regression) a peer said goodbye with our messages
 *                   unacknowledged: when due they fail, quietly, and
 *                   nothing is sent again;
 *   leaving_bye_lost  (regression) we leave and our goodbye goes
 *                   unanswered: the path fails, no failover, no ping
 *                   (the keepalive shorter than the path timeout),
 *                   quietly;
 *   leaving_data_unacked  (regression) we leave; our messages and our
 *                   goodbye go unanswered (the peer had them and left,
 *                   its acks lost): the same, the messages fail quietly;
 *   closed_before_bye  (regression) a peer closed a path cleanly before
 *                   its goodbye came: nothing more goes to it on any path,
 *                   and after a silent keepalive period what is left
 *                   fails, quietly;
 *   closed_then_ack  (regression) a frame from a peer that closed a path
 *                   cleanly arrives late: handed up, and no ack goes out
 *                   on the path left (a dial the departed rank refuses);
 *   reenter         an arrival while the deliverer hands a message up:
 *                   queued, handed up after it;
 *   wrap            sequence numbers start 40 below 2^32, 5 % of frames
 *                   lost both ways: every message once, in order;
 *   corrupt         1 % of frames get a bit flipped anywhere: all caught,
 *                   0 corrupted deliveries;
 *   failover        path 0 goes dark mid-stream: traffic moves to path 1
 *                   within the path timeout, exactly once; path 0 heals:
 *                   probes bring the traffic back (fail-back);
 *   failback_due    (regression) path 0 comes back while a fragment is
 *                   retransmitted on path 1, near its path timeout: at
 *                   its next timeout it goes out on path 0 (the timer
 *                   pass looped for ever on it);
 *   fornow          path 0's transport reports the peer down for now
 *                   (TW_ERR_TRANSPORT) and refuses sends: traffic moves to
 *                   path 1 at once; probes are refused, so no fail-back
 *                   while it is down; once it takes sends again, probes
 *                   bring the traffic back;
 *   fornow_refused  the same with the refusal seen before the report (the
 *                   transport's peer_down not run yet);
 *   fornow_forgood  for contrast, a report for good: never probed again;
 *   refusing        path 0 refuses every frame (TW_ERR_AGAIN) and nothing
 *                   new is acked: given up after the path timeout, traffic
 *                   on path 1 (never offered for ever);
 *   refusing_only   the same on the only path: the peer fails;
 *   nopath          the only path goes dark: every pending send completes
 *                   TW_ERR_PEER_FAILED, the peer is reported down once;
 *   keepalive       the peer stops answering anything: failed after
 *                   keepalive x misses, not before;
 *   early_stamp     a send stamped with an earlier clock reading: its
 *                   first timeout counts from the pass that found it;
 *   pause           a pause of progress longer than the keepalive bound:
 *                   both ping first, nobody fails.
 *
 * And by name only (not in --list; label stress, unit/rel.cmake):
 *   b6              matrix row B6: 10^6 fragments (both ways), 1 %
 *                   corrupted, 0 corrupted deliveries (TWTEST_SCALE
 *                   divides the count).
 */
#include <string.h>

#include "test_rel_rig.h"

static const twt_case_t cases[] = {
    {"basic", case_basic},
    {"first_frag", case_first_frag},
    {"last_frag", case_last_frag},
    {"ack_lost", case_ack_lost},
    {"nack_lost", case_nack_lost},
    {"dup_done", case_dup_done},
    {"dup_held", case_dup_held},
    {"crc_short", case_crc_short},
    {"crc_long", case_crc_long},
    {"far_stale", case_far_stale},
    {"left_then_closed", case_left_then_closed},
    {"left_then_due", case_left_then_due},
    {"leaving_bye_lost", case_leaving_bye_lost},
    {"leaving_data_unacked", case_leaving_data_unacked},
    {"closed_before_bye", case_closed_before_bye},
    {"closed_then_ack", case_closed_then_ack},
    {"reenter", case_reenter},
    {"wrap", case_wrap},
    {"corrupt", case_corrupt},
    {"failover", case_failover},
    {"failback_due", case_failback_due},
    {"fornow", case_fornow},
    {"fornow_refused", case_fornow_refused},
    {"fornow_forgood", case_fornow_forgood},
    {"refusing", case_refusing},
    {"refusing_only", case_refusing_only},
    {"nopath", case_nopath},
    {"keepalive", case_keepalive},
    {"early_stamp", case_early_stamp},
    {"pause", case_pause},
};

int main(int argc, char **argv)
{
    /* b6 is a stress row of its own: a run of every case leaves it out. */
    if (argc == 2 && strcmp(argv[1], "b6") == 0) {
        case_b6();
        printf("rel b6: passed\n");
        return 0;
    }
    return twt_cases_main(argc, argv, cases, TWT_ARRAY_SIZE(cases));
}
