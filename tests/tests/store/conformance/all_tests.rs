//! The suite's tests by theme, in one list that both `main.rs` (one `#[tokio::test]` each) and
//! `lua_keys` (every test on one monitored server) expand.

/// `conformance_list!(callback!(prefix...))` calls `callback!(prefix... theme { test, ... } ...)`
/// with every test of the suite.
macro_rules! conformance_list {
    ($callback:ident ! ($($prefix:tt)*)) => {
        $callback! { $($prefix)*
            lifecycle {
                create_queues_a_running_task,
                create_reserves_a_paid_task,
                trace_context_and_creation_time_reach_the_claim,
                duplicate_ids_are_refused,
                missing_tasks_read_as_none,
                a_run_publishes_exactly_one_result_update,
                a_failure_persists_its_error_and_publishes_it,
                cancel_during_execution_wins_over_completion,
                cancelling_a_queued_task_empties_its_queue_slot,
                compare_and_set_checks_the_expected_status,
                claiming_clears_the_admission_expiry,
                claiming_an_expired_admission_cancels_it,
                hand_off_releases_the_claim_to_the_queue,
                a_failed_completion_leaves_the_task_recoverable,
                take_next_wakes_when_a_task_is_queued,
                take_next_honours_max_entrypoints_and_fifo,
                terminal_tasks_vanish_after_retention,
            }
            leases {
                fifty_concurrent_claimers_one_winner,
                fifty_concurrent_takers_one_winner,
                a_live_claim_blocks_other_claimers,
                every_claim_gets_a_new_epoch,
                an_expired_lease_is_dead,
                stale_writes_are_fenced_after_recovery,
                a_stale_prepared_claim_cannot_activate,
                a_lease_fences_only_its_own_task,
                heartbeat_keeps_a_prepared_claim_alive,
                renewals_by_phase,
                emit_numbers_events_while_the_lease_holds,
            }
            capacity {
                a_third_live_task_exceeds_max_tasks_two,
                terminal_tasks_never_block_creation,
                reaping_happens_before_capacity_is_enforced,
                an_expired_active_lease_keeps_its_slot,
                finishing_a_task_frees_its_slot,
            }
            subscriptions {
                owner_isolation_across_reads,
                subscribe_then_snapshot_misses_nothing,
                replay_resumes_after_a_sequence_number,
                a_finished_task_replays_exactly_what_it_published,
                events_of_other_tasks_stay_out,
                dropping_a_subscription_leaves_the_others,
            }
            recovery {
                an_expired_claim_after_hand_off_is_requeued,
                an_abandoned_run_is_retried_then_failed,
                a_run_past_its_deadline_times_out,
                expired_reservations_and_early_claims_are_cancelled,
                reaping_spares_active_leases,
                recovery_follows_deadlines_and_limit,
                live_work_is_left_alone,
                concurrent_sweeps_recover_each_task_once,
                a_receipt_commits_a_claimed_reservation_to_run,
                a_late_receipt_is_attached_to_the_reaped_task,
            }
            settlement {
                a_held_claim_outlives_its_deadline_untouched,
                a_recovered_receipt_commits_a_held_task_to_run,
                the_holders_receipt_hands_a_held_task_off,
                a_held_task_can_be_cancelled,
                holding_is_fenced,
            }
            list {
                lists_the_owners_tasks_newest_first,
                filters_by_context_and_status,
                pages_with_total_and_has_more,
                the_default_page_holds_fifty,
                selects_by_small_fields_newest_update_first,
                a_private_owners_task_runs_and_is_never_listed,
            }
            property {
                live_count_matches_the_tasks,
            }
            take_finish {
                take_active_claims_and_activates,
                take_active_counts_attempts_after_recovery,
                a_take_without_waiting_finds_what_was_queued_after_the_queue_ran_dry,
                finish_and_take_starts_the_next_task,
                a_fenced_out_finish_is_never_lost_or_applied,
                concurrent_finish_and_take_hands_each_task_out_once,
                create_watched_follows_the_run_from_its_first_event,
            }
            turns {
                a_run_can_wait_for_input_and_be_resumed,
                a_waiting_task_can_be_cancelled,
                await_input_is_fenced,
                concurrent_resumes_resume_once,
                recovery_leaves_a_waiting_task_alone,
                an_unanswered_request_times_out,
                an_answer_clears_the_waiting_deadline,
            }
            failed {
                failed_tasks_are_paged_newest_first,
                recovery_failures_enter_the_failed_index,
                forgotten_failures_leave_the_index_not_the_store,
            }
            retries {
                a_retry_waits_out_its_backoff_then_runs_again,
                retry_later_is_fenced,
                a_task_in_backoff_can_be_cancelled,
                the_reaping_sweep_queues_a_due_backoff,
                retries_do_not_spend_the_lost_worker_budget,
            }
        }
    };
}

pub(crate) use conformance_list;
