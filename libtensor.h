/*
 * libtensor.h: the umbrella header of the core. Include this one file to use
 * libtensor (link libtensor, CMake target libtensor::tensor):
 *     #include <libtensor/libtensor.h>
 * Each module has one public header, documented there:
 *   tensor/tensor.h      N-d tensors, ops, matmul on BLIS, random numbers
 *   tensor/quant.h       weight formats for inference: bf16, Q8_0 and Q4_0 blocks (ggml's)
 *   autograd/autograd.h  reverse-mode differentiation, gradcheck
 *   nn/nn.h              parameters, layers, attention, losses, optimizers, schedules
 *   nn/conv.h            convolution, pooling
 *   nn/transformer_layer.h  Transformer encoder/decoder layers on embeddings (pre/post-norm)
 *   generate/generate.h  autoregressive generation for any model: greedy, beam search, sampling
 *   datasets/datasets.h  IDX images (Fashion-MNIST), tokenizers, corpora, tasks, batching
 *   checkpoint/checkpoint.h  HDF5 checkpoints: save, load, resume (safe and durable)
 *   checkpoint/safetensors.h, checkpoint/gguf.h  safetensors and GGUF files, read bounded and checked
 *   train/trainer.h      the training loop for any model: accumulation, clipping,
 *                        evaluation and checkpoint cadence, resume, metrics CSV, stop requests
 *   dist/dist.h          data parallelism over Open MPI: ranks, broadcast, allreduce, sharding
 * Models are libraries of their own on top of the core, each with its own
 * umbrella header: the Transformer is <libtensor/libtensor_transformer.h>.
 */
#ifndef LIBTENSOR_H
#define LIBTENSOR_H

#include "tensor/tensor.h"
#include "tensor/quant.h"
#include "autograd/autograd.h"
#include "autograd/custom.h"
#include "autograd/recompute.h"
#include "nn/nn.h"
#include "nn/conv.h"
#include "nn/lstm.h"
#include "nn/transformer_layer.h"
#include "generate/generate.h"
#include "datasets/datasets.h"
#include "checkpoint/checkpoint.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/gguf.h"
#include "train/trainer.h"
#include "train/classify.h"
#include "dist/dist.h"

#endif
