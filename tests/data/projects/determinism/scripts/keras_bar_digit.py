"""Two runs whose only difference is one digit of the loss inside a Keras progress bar.

Run side by side by `reprobuild verify --data LOCKDIR`: the run that takes the lock on
/data/lock first prints loss 0.4123, the other 0.4124 (flock works across containers on one
kernel; the holder keeps it until both have started). Everything else on the bar is
wall-clock noise, so verify must report the loss digit, not the timings."""

import fcntl
import time

with open("/data/lock") as held:
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        loss = 0.4123
    except BlockingIOError:
        loss = 0.4124
    import keras  # after the lock: the holder holds it while the other run starts

    print("Epoch 1/1", flush=True)
    bar = keras.utils.Progbar(20, interval=0.0)
    for step in range(1, 21):
        time.sleep(0.05)
        bar.update(step, values=[("loss", loss if step == 20 else 1.0 / step)], finalize=step == 20)
    time.sleep(3)
