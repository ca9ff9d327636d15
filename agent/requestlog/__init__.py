"""Request-log source: follow ``kafka-request.log``, parse lines, aggregate 10 s windows."""
