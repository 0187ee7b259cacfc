"""Fine-tuning machinery shared by every task family (``xlnet_tf.tasks``): the runner of run_classifier.py and
run_squad.py, the training and prediction loops, feature caches, metrics, TF Serving exports."""
