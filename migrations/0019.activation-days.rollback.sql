-- Back to activations one by one. Days already rolled up cannot be turned back into single
-- activations (and their partitions of `activations` are gone): the access reports of
-- those days are lost with activation_days. Run the reports first.
DROP TABLE activation_days, activation_rollup;
