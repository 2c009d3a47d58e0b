DROP TABLE false_positives;
