"""The ground floor: settings, the cache, the hardware, the Hub question, argument checks."""
