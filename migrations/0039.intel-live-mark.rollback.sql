DROP TABLE intel_live_mark;
