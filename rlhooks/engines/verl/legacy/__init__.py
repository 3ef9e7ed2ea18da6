"""verl's legacy trainer (``trainer.use_v1=false``, ``RayPPOTrainer``): the rlhooks restatement of its
``fit()`` (:mod:`.trainer`) and the TaskRunner that builds it (:mod:`.runner`).

Everything here exists only while verl ships the legacy trainer; the day verl drops it, deleting this
package (and ``LEGACY_RELIED_ON`` in ``compat.py``) removes it. Nothing the V1 path needs imports it.
"""
