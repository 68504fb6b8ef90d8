"""The config search's strategies: the measured search, and the predicted search (calibrate,
predict, measure the best)."""
