DROP TABLE generation_queue;
