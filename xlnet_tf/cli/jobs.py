"""``python -m xlnet_tf.cli.jobs finetune JOB.yaml``: fine-tuning runs from a job file (docs/batch.md)."""

if __name__ == "__main__":
    import sys

    from xlnet_tf.batch.job_runner import main

    sys.exit(main())
