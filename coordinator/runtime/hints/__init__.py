"""Wake-up hints over Postgres LISTEN/NOTIFY: relay wake-ups, timers, saga ends."""
