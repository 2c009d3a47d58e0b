DROP TABLE intel_matched;
DROP INDEX intel_indicators_inet;
DROP TABLE enforcement_hits;
DROP TABLE enforcement_days;
