DROP TABLE weekly_reports;
DROP TABLE owner_reports;
