#!/usr/bin/env python3
"""The textproto reader of scripts/bench_pytorch_stacks.py (no PyTorch
needed): the benchmark stacks read as the server reads them, so the PyTorch
peer runs the same layers."""
import os
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import bench_pytorch_stacks as stacks  # noqa: E402


def bench_file(name):
    return os.path.join(ROOT, "tests", "bench", name)


class ReadStackTest(unittest.TestCase):
    def test_resnet_bottleneck_stack(self):
        name, dtype, layout, channels, layers = stacks.read_stack(
            bench_file("resnet50_bottleneck_stack.textproto"))
        self.assertEqual((name, dtype, layout, channels),
                         ("resnet50_bottleneck_56x3", "FLOAT16", "NHWC", 256))
        self.assertEqual([(l["in_channels"], l["out_channels"], l["kernel"]) for l in layers],
                         [(256, 64, (1, 1)), (64, 64, (3, 3)), (64, 256, (1, 1))] * 3)
        self.assertTrue(all(l["activation"] == "relu" for l in layers))
        self.assertEqual(layers[1]["pad_before"], (1, 1))
        self.assertEqual(layers[0]["pad_before"], (0, 0))

    def test_mobilenet_block_uses_relu6_depthwise_and_a_linear_projection(self):
        name, _, _, channels, layers = stacks.read_stack(
            bench_file("mobilenetv2_block_stack.textproto"))
        self.assertEqual((name, channels), ("mobilenetv2_block_56x2", 24))
        self.assertEqual(len(layers), 6)
        expand, depthwise, project = layers[:3]
        self.assertEqual((expand["activation"], expand["clip"]), ("relu_clip", 6))
        self.assertEqual((depthwise["groups"], depthwise["in_channels"]), (144, 144))
        self.assertEqual(project["activation"], "identity")
        self.assertEqual(layers[3]["in_channels"], 24)

    def test_parser_reads_nested_messages_lists_strings_and_comments(self):
        fields = stacks.parse_textproto(
            '# comment\nname: "a b" # trailing\nlayers { kernel_size: [3, 5] activation '
            '{ kind: RELU upper_clip: 6.5 } }\nlayers { stride: 2 stride: 1 }\n')
        self.assertEqual(fields["name"], ["a b"])
        self.assertEqual(fields["layers"][0]["kernel_size"], [3, 5])
        self.assertEqual(fields["layers"][0]["activation"][0]["upper_clip"], [6.5])
        self.assertEqual(fields["layers"][1]["stride"], [2, 1])

    def test_activations_the_peer_cannot_run_are_refused(self):
        with tempfile.TemporaryDirectory() as tmp:
            for activation in ("kind: SWISH", "kind: RELU negative_slope: 0.1"):
                path = os.path.join(tmp, "g.textproto")
                with open(path, "w") as f:
                    f.write("name: \"g\" input_channels: 8 layers { out_channels: 8 "
                            f"kernel_size: [1, 1] activation {{ {activation} }} }}")
                with self.assertRaises(ValueError, msg=activation):
                    stacks.read_stack(path)

if __name__ == "__main__":
    unittest.main()
