"""``python -m xlnet_tf.cli.predict``: batch prediction over sharded inputs with a SavedModel (docs/batch.md)."""

if __name__ == "__main__":
    from xlnet_tf.batch.prediction import main

    main()
