DROP TABLE hunt_network_budgets;
