"""Fine-tuning on GLUE-style classification/regression and RACE: data, metrics, SavedModel export, runner."""
