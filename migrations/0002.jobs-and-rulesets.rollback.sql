DROP TABLE job_ticks;
DROP TABLE job_runs;
