"""attnkit.reference: the NumPy twin of attnkit (imports numpy only).

Every layer has a hand-written ``forward``/``backward`` pair checked against
central differences (:func:`gradcheck`) and against torch autograd in the
tests; optimizers, a trainer, two classifiers, safetensors weight exchange
with the torch models, and attention analysis complete it.
"""
