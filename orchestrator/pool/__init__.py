"""The warm pool: CI boxes kept ready, leased and released through a shared store."""
