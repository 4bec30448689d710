-- Derived metrics kept up to date incrementally: `metrics_tally` is the sum of the evaluation's
-- results' metric tallies (JSON, see storage/derived.py); each result write adds or subtracts one
-- result's tally instead of re-reading every result. NULL (evaluations stored before this
-- migration) means "not summed yet": the next write of one of its results sums them once.
ALTER TABLE evaluations ADD COLUMN metrics_tally TEXT;
-- The newest completed result and the runs, found by index instead of a scan.
CREATE INDEX results_evaluation_completed ON evaluation_results (evaluation, execution_state, create_time, name);
CREATE INDEX results_evaluation_run_time ON evaluation_results (evaluation, evaluation_run, create_time);
