"""Rule generation: pure functions run in a process pool. Imports nothing from the web layer
or the database; the server reaches it through `engine.pool.GenerationPool.run`."""
