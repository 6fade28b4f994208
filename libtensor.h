/*
 * libtensor.h: the umbrella header. Include this one file to use libtensor:
 *     #include <libtensor/libtensor.h>
 * Each module has one public header, documented there:
 *   tensor/tensor.h      N-d tensors, ops, matmul on BLIS, random numbers
 *   autograd/autograd.h  reverse-mode differentiation, gradcheck
 *   nn/nn.h              parameters, layers, attention, losses, optimizers, schedules
 *   datasets/datasets.h  IDX images (Fashion-MNIST), tokenizers, corpora, tasks, batching
 *   checkpoint/checkpoint.h  HDF5 checkpoints: save, load, resume (safe and durable)
 *   train/trainer.h      the training loop: accumulation, clipping, evaluation and
 *                        checkpoint cadence, resume, metrics CSV, stop requests
 *   models/transformer/transformer.h  the Transformer (encoder-decoder, decoder-only, encoder-only)
 *   models/transformer/generate.h     decoding, and the model's configuration in checkpoints
 */
#ifndef LIBTENSOR_H
#define LIBTENSOR_H

#include "tensor/tensor.h"
#include "autograd/autograd.h"
#include "nn/nn.h"
#include "datasets/datasets.h"
#include "checkpoint/checkpoint.h"
#include "train/trainer.h"
#include "models/transformer/transformer.h"
#include "models/transformer/generate.h"

#endif
