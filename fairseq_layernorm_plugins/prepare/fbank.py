"""Log mel filter banks as fairseq's speech-to-text examples compute them, without torchaudio.

fairseq's ``examples/speech_to_text/data_utils.py`` (``extract_fbank_features``) scales a
waveform in [-1, 1] by 2^15 (Kaldi reads 16-bit samples) and calls
``torchaudio.compliance.kaldi.fbank(waveform, num_mel_bins=80, sample_frequency=sr)``:
Kaldi's ``compute-fbank-feats`` with its defaults except no dither. :func:`fbank` computes the
same with kaldi-native-fbank (Kaldi's C++ code without Kaldi), whose defaults differ from
torchaudio's in the dither, the number of bins and the energy floor; those are set here.
Per frame (25 ms every 10 ms, frames that fit whole: ``1 + (samples - 400) // 160`` at 16 kHz):
remove the DC offset, pre-emphasise (0.97), Povey window, power spectrum of a 512-point FFT,
80 triangular filters evenly spaced on Kaldi's mel scale from 20 Hz to Nyquist, natural log
floored at float32's epsilon.
"""

import importlib

import numpy as np

from fairseq_layernorm_plugins.prepare.textio import DataError

NUM_BINS = 80
SAMPLE_RATE = 16000  # LibriSpeech's
KALDI_SCALE = 2**15  # float samples in [-1, 1] as 16-bit integers (data_utils.extract_fbank_features)


def speech_module(name):
    """The module ``name`` of the package's ``speech`` extra; when it is missing, a one-line
    error saying how to install it."""
    try:
        return importlib.import_module(name)
    except ImportError:
        raise DataError(f"{name} is not installed: pip install 'fairseq_layernorm_plugins[speech]'") from None


def fbank_options(sample_rate, num_bins=NUM_BINS):
    """kaldi-native-fbank's options set to torchaudio.compliance.kaldi.fbank's defaults."""
    knf = speech_module("kaldi_native_fbank")
    opts = knf.FbankOptions()
    opts.frame_opts.samp_freq = sample_rate
    opts.frame_opts.dither = 0.0  # torchaudio: 0.0; knf: 3e-5
    opts.frame_opts.frame_length_ms = 25.0
    opts.frame_opts.frame_shift_ms = 10.0
    opts.frame_opts.preemph_coeff = 0.97
    opts.frame_opts.remove_dc_offset = True
    opts.frame_opts.window_type = "povey"
    opts.frame_opts.round_to_power_of_two = True
    opts.frame_opts.snip_edges = True
    opts.mel_opts.num_bins = num_bins  # knf: 23
    opts.mel_opts.low_freq = 20.0
    opts.mel_opts.high_freq = 0.0  # 0: the Nyquist frequency
    opts.mel_opts.is_librosa = False  # Kaldi's mel scale and unnormalised filters
    opts.use_energy = False
    opts.energy_floor = 1.0  # torchaudio: 1.0; knf: 0.0 (read only with use_energy)
    opts.raw_energy = True
    opts.htk_compat = False
    opts.use_log_fbank = True
    opts.use_power = True
    return opts


def fbank(waveform, sample_rate, num_bins=NUM_BINS):
    """Log mel filter banks of a mono float waveform in [-1, 1].

    Args:
        waveform (np.ndarray): ``(samples,)`` float
        sample_rate (int): its rate in Hz

    Returns:
        np.ndarray: ``(frames, num_bins)`` float32, ``frames = 1 + (samples - window) // shift``
        (0 when shorter than one window)
    """
    knf = speech_module("kaldi_native_fbank")
    waveform = np.asarray(waveform, dtype=np.float32)
    if waveform.ndim != 1:
        raise ValueError(f"fbank: a mono waveform (samples,), not shape {waveform.shape}")
    extractor = knf.OnlineFbank(fbank_options(sample_rate, num_bins))
    extractor.accept_waveform(sample_rate, (waveform * KALDI_SCALE).tolist())
    extractor.input_finished()
    frames = extractor.num_frames_ready
    features = np.empty((frames, num_bins), dtype=np.float32)
    for i in range(frames):
        features[i] = extractor.get_frame(i)
    return features


def read_audio(path, sample_rate=SAMPLE_RATE):
    """A mono recording (FLAC, WAV: what libsndfile reads) as ``((samples,) float32 in [-1, 1],
    sample rate)``; an unreadable file, or one not mono at ``sample_rate``, is a one-line error
    naming it."""
    soundfile = speech_module("soundfile")
    try:
        with soundfile.SoundFile(str(path)) as f:
            rate, channels, expected = f.samplerate, f.channels, f.frames
            waveform = f.read(dtype="float32", always_2d=True)
    except (RuntimeError, OSError) as err:  # soundfile's errors are RuntimeErrors
        raise DataError(f"{path}: unreadable audio ({' '.join(str(err).split())})") from None
    if waveform.shape[0] != expected:
        raise DataError(f"{path}: truncated ({waveform.shape[0]} of its {expected} samples)")
    if channels != 1:
        raise DataError(f"{path}: {channels} channels, not mono")
    if rate != sample_rate:
        raise DataError(f"{path}: sampled at {rate} Hz, not {sample_rate}")
    if waveform.shape[0] == 0:
        raise DataError(f"{path}: no samples")
    return waveform[:, 0], rate
